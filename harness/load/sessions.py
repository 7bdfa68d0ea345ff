"""The sessions load: N EnvHost sessions of guess_number open at once, every answer checked
against its own session (see harness/load)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from opentinker_api.envhost.v1 import envhost_service_pb2 as env_pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as env_grpc
from opentinker.client.scheduler_requests import bearer_metadata
from opentinker_runtime.games.guess_number_game import CORRECT, HIGHER, LOWER, GuessNumberGame
from harness.load.base import CHANNEL_OPTIONS, RANGE_SIZE, RANGE_STRIDE, RPC_TIMEOUT_S, rpc_text
from harness.load.probes import descendants, read_metric, wait_for_metric


@dataclass(frozen=True, kw_only=True)
class SessionPlan:
    """What session `index` sends and must be answered: wrong guesses first, the secret last."""

    index: int
    low: int
    high: int
    seed: int
    secret: int
    guesses: tuple[int, ...]

    @property
    def config(self) -> dict[str, int]:
        return {"low": self.low, "high": self.high, "seed": self.seed, "max_turns": len(self.guesses)}


def plan_session(index: int, *, steps: int, seed: int) -> SessionPlan:
    low = RANGE_STRIDE * index + 1
    high = low + RANGE_SIZE - 1
    secret = GuessNumberGame(low=low, high=high, seed=seed).secret_for("train", 0)
    wrong = [n for n in range(low, high + 1) if n != secret][: steps - 1]
    wrong = wrong[::2] + wrong[1::2]  # mix guesses below and above the secret
    return SessionPlan(index=index, low=low, high=high, seed=seed, secret=secret, guesses=(*wrong, secret))


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message


class UnarySessions:
    """OpenSession / Reset / Step / CloseSession as unary calls on one shared channel."""

    def __init__(self, stub: env_grpc.EnvHostServiceStub, metadata: Sequence[tuple[str, str]]) -> None:
        self.stub, self.metadata = stub, tuple(metadata)

    async def call(self, request: Any) -> Any:
        method = {env_pb.OpenSessionRequest: self.stub.OpenSession, env_pb.ResetRequest: self.stub.Reset,
                  env_pb.StepRequest: self.stub.Step, env_pb.CloseSessionRequest: self.stub.CloseSession}
        return await method[type(request)](request, metadata=self.metadata, timeout=RPC_TIMEOUT_S)


class InteractStream:
    """One Interact stream shared by many sessions: requests are written as they come, answers
    are matched to their caller by `sequence` (they may arrive in any order)."""

    FIELD = {env_pb.OpenSessionRequest: "open_session", env_pb.ResetRequest: "reset",
             env_pb.StepRequest: "step", env_pb.CloseSessionRequest: "close_session"}

    def __init__(self, stub: env_grpc.EnvHostServiceStub, metadata: Sequence[tuple[str, str]]) -> None:
        self.outbox: asyncio.Queue[env_pb.InteractRequest | None] = asyncio.Queue()
        self.waiting: dict[int, asyncio.Future[env_pb.InteractResponse]] = {}
        self.sequences = itertools.count(1)
        self.unexpected: list[str] = []
        self.call_handle = stub.Interact(self._requests(), metadata=tuple(metadata))
        self.reader = asyncio.create_task(self._read())

    async def _requests(self) -> AsyncIterator[env_pb.InteractRequest]:
        while (request := await self.outbox.get()) is not None:
            yield request

    async def _read(self) -> None:
        try:
            async for response in self.call_handle:
                future = self.waiting.pop(response.sequence, None)
                if future is None:
                    self.unexpected.append(f"Interact answered unknown sequence {response.sequence}")
                else:
                    future.set_result(response)
        except grpc.RpcError as error:
            self.unexpected.append(f"Interact stream failed: {rpc_text(error)}")
        finally:
            if self.waiting:
                self.unexpected.append(f"Interact stream ended with {len(self.waiting)} requests unanswered")
            for future in self.waiting.values():
                future.set_exception(RuntimeError("the Interact stream ended before answering"))
            self.waiting.clear()

    async def call(self, request: Any) -> Any:
        sequence = next(self.sequences)
        future = asyncio.get_running_loop().create_future()
        self.waiting[sequence] = future
        await self.outbox.put(env_pb.InteractRequest(sequence=sequence, **{self.FIELD[type(request)]: request}))
        response = await asyncio.wait_for(asyncio.shield(future), RPC_TIMEOUT_S)
        if response.WhichOneof("result") == "error":
            raise RuntimeError(f"Interact error: {response.error.message}")
        expected = self.FIELD[type(request)]
        if response.WhichOneof("result") != expected:
            raise RuntimeError(f"Interact answered {response.WhichOneof('result')} to a {expected} request")
        return getattr(response, expected)

    async def aclose(self) -> None:
        await self.outbox.put(None)
        await asyncio.wait_for(self.reader, RPC_TIMEOUT_S)


@dataclass(kw_only=True)
class SessionsReport:
    sessions: int
    steps_per_session: int
    opened: int = 0
    steps_ok: int = 0
    closed: int = 0
    open_at_peak: float = 0
    open_after_close: float = -1
    limit_refusal: str = ""
    """How the EnvHost answered one more OpenSession while all were open ('' = not tried)."""
    processes_before: int = 0
    processes_after: int = 0
    """Child processes of the EnvHost before the round and once every session was closed (game
    processes under process isolation; 0 and 0 with threads)."""
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


async def _play_session(transport: UnarySessions | InteractStream, plan: SessionPlan, opened: asyncio.Barrier,
                        stepped: asyncio.Barrier, report: SessionsReport) -> None:
    """Open and reset, wait until every session is open, step through the plan, wait until
    every session has stepped, close. A failure goes to report.problems and breaks the barriers,
    so the other sessions stop waiting and close too."""
    session_id, sent = "", 0
    try:
        answer = await transport.call(env_pb.OpenSessionRequest(env_name="guess_number", config=_struct(plan.config),
                                                                request_id=uuid.uuid4().hex))
        session_id = answer.session_id
        report.opened += 1
        reset = await transport.call(env_pb.ResetRequest(session_id=session_id, kwargs=_struct({"index": 0})))
        if f"{plan.low} to {plan.high}" not in reset.observation:
            report.problems.append(f"session {plan.index}: reset observed {reset.observation!r}")
        await opened.wait()
        for turn, guess in enumerate(plan.guesses, start=1):
            step = await transport.call(env_pb.StepRequest(session_id=session_id, action=str(guess)))
            sent += 1
            report.problems.extend(check_step(plan, turn, guess, step))
            report.steps_ok += 1
        await stepped.wait()
    except asyncio.BrokenBarrierError:
        pass  # another session failed (and said so); this one only closes
    except (grpc.RpcError, RuntimeError, TimeoutError) as error:
        report.problems.append(f"session {plan.index}: {type(error).__name__}: {rpc_text(error)}")
        opened.abort()
        stepped.abort()
    if session_id:
        await _close_session(transport, plan, session_id, sent, report)


async def _close_session(transport: UnarySessions | InteractStream, plan: SessionPlan, session_id: str,
                         sent: int, report: SessionsReport) -> None:
    try:
        closed = await transport.call(env_pb.CloseSessionRequest(session_id=session_id))
    except (grpc.RpcError, RuntimeError, TimeoutError) as error:
        report.problems.append(f"session {plan.index}: CloseSession: {rpc_text(error)}")
        return
    report.closed += 1
    if closed.steps != sent:
        report.problems.append(f"session {plan.index}: closed after {closed.steps} steps, sent {sent}")


def check_step(plan: SessionPlan, turn: int, guess: int, step: env_pb.StepResponse) -> list[str]:
    """Every way this answer could belong to another session or another turn."""
    info = json_format.MessageToDict(step.info)
    last = turn == len(plan.guesses)
    hint = CORRECT if guess == plan.secret else HIGHER if plan.secret > guess else LOWER
    problems = []
    if step.observation != hint or step.done != last:
        problems.append(f"session {plan.index} turn {turn}: guessed {guess}, answered "
                        f"{step.observation!r} done={step.done}, expected {hint!r} done={last}")
    if info.get("guess") != guess or info.get("turn") != turn:
        problems.append(f"session {plan.index} turn {turn}: info {info} is not this session's turn")
    if last and info.get("secret") != plan.secret:
        problems.append(f"session {plan.index}: the episode ended with secret {info.get('secret')}, not {plan.secret}")
    return problems


async def _refusal_while_full(stub: env_grpc.EnvHostServiceStub, metadata: Sequence[tuple[str, str]]) -> str:
    """What one more OpenSession gets while every session is open."""
    try:
        answer = await stub.OpenSession(env_pb.OpenSessionRequest(env_name="guess_number"), metadata=metadata,
                                        timeout=RPC_TIMEOUT_S)
    except grpc.aio.AioRpcError as error:
        return f"{error.code().name}: {error.details()}"
    await stub.CloseSession(env_pb.CloseSessionRequest(session_id=answer.session_id), metadata=metadata)
    return "OK (accepted)"


async def sessions_load(address: str, api_key: str, *, sessions: int, steps: int, metrics_url: str,
                        envhost_pid: int, streams: int = 8, seed: int = 0,
                        probe_limit: bool = False) -> SessionsReport:
    """`sessions` guess_number sessions open at once, `steps` steps each, then all closed (see
    the module docstring). `probe_limit`: while all are open, one more OpenSession is tried and
    its answer kept in `limit_refusal` (meant for sessions == the EnvHost's max_sessions)."""
    report = SessionsReport(sessions=sessions, steps_per_session=steps)
    report.processes_before = len(descendants(envhost_pid))
    plans = [plan_session(i, steps=steps, seed=seed) for i in range(sessions)]
    metadata = bearer_metadata(api_key)
    started = time.monotonic()
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = env_grpc.EnvHostServiceStub(channel)
        unary = UnarySessions(stub, metadata)
        interact = [InteractStream(stub, metadata) for _ in range(streams)]
        transports = [unary if i % 2 == 0 else interact[(i // 2) % streams] for i in range(sessions)]
        opened, stepped = asyncio.Barrier(sessions + 1), asyncio.Barrier(sessions + 1)
        players = [asyncio.create_task(_play_session(t, p, opened, stepped, report))
                   for t, p in zip(transports, plans, strict=True)]
        with contextlib.suppress(asyncio.BrokenBarrierError):
            await opened.wait()
            report.open_at_peak = await read_metric(metrics_url, "opentinker_envhost_open_sessions")
            if probe_limit:
                report.limit_refusal = await _refusal_while_full(stub, metadata)
            await stepped.wait()
        await asyncio.gather(*players)
        for stream in interact:
            await stream.aclose()
            report.problems.extend(stream.unexpected)
    report.seconds = time.monotonic() - started
    report.open_after_close = await wait_for_metric(metrics_url, "opentinker_envhost_open_sessions",
                                                    lambda value: value == 0)
    report.processes_after = await _processes_settled(envhost_pid, report.processes_before)
    report.problems.extend(_session_count_problems(report))
    return report


async def _processes_settled(pid: int, wanted: int, *, timeout_s: float = 15.0) -> int:
    """Poll until `pid` has at most `wanted` descendants (closed games' processes exit
    asynchronously) or the deadline; how many it has."""
    deadline = time.monotonic() + timeout_s
    while len(found := descendants(pid)) > wanted and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return len(found)


def _session_count_problems(report: SessionsReport) -> list[str]:
    problems = []
    if report.processes_after > report.processes_before:
        problems.append(f"the EnvHost has {report.processes_after} child processes after every session "
                        f"closed, {report.processes_before} before the round")
    if report.open_at_peak != report.sessions:
        problems.append(f"the EnvHost counted {report.open_at_peak:g} open sessions with all "
                        f"{report.sessions} open")
    if report.open_after_close != 0:
        problems.append(f"{report.open_after_close:g} sessions still open after every session was closed")
    if report.closed != report.sessions:
        problems.append(f"closed {report.closed} of {report.sessions} sessions")
    return problems
