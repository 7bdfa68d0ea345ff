"""Load against a live stack: many EnvHost sessions, many queued jobs, many watchers of one job.

Shared by tests/chaos/test_load.py (bounded, in CI) and bench/load.py (full size, a printed
summary). Everything goes through the real services over real sockets, with the stack's admin
key. Each load function returns a report whose `problems` lists every lost, duplicated or
mismatched item it found (empty = nothing lost), with counts to print; none of them raises on
a finding, so a bench can report all of them.

* `sessions_load`: N EnvHost sessions of `guess_number`, all open at once, each in a number
  range of its own (session i guesses in 100*i+1..100*i+64), stepped concurrently: half over
  unary calls on one channel (like the Rollout), half multiplexed on a few Interact streams.
  The secret of every session is computed locally from the same game class, so every answer is
  checked exactly (the hint, the echoed guess, `done` only on the last step, the secret at the
  end): an answer meant for another session cannot pass. Then every session is closed (its step
  count must match), the EnvHost's open-sessions gauge must come back to 0 and its child
  processes (games under process isolation) to as many as before. Works with either isolation.
* `queued_jobs_load`: N jobs for a fresh tenant whose quota allows exactly N queued, each asking
  64 trainer devices on one worker (no worker here has them, so they stay QUEUED and nothing
  trains): submit, the (N+1)th refused, every job listed QUEUED (ListJobs pages), GetJob, cancel
  all, all listed CANCELLED, their events replayed (exactly QUEUED then CANCELLED).
* `watchers_load`: one short real RL job (tiny model) with W WatchJob streams from the start,
  each on its own channel; all must see the same gap-free sequence 1..last ending in SUCCEEDED,
  and a watcher that hangs up and resumes with after_sequence must get exactly the rest.
* `ProcessProbe` / `MemoryTrend`: memory (PSS of the process and its children) and open file
  descriptors of a service, sampled during and after each round; "flat" = after a warm-up round
  the end-of-round memory grows less than RSS_BOUND_MIB.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from opentinker.api.envhost.v1 import envhost_service_pb2 as env_pb
from opentinker.api.envhost.v1 import envhost_service_pb2_grpc as env_grpc
from opentinker.api.scheduler.v1 import job_pb2
from opentinker.api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker.client.scheduler_requests import bearer_metadata, quota, submit_request
from opentinker.env.guess_number_game import CORRECT, HIGHER, LOWER, GuessNumberGame

S = job_pb2.Job
MiB = 1024 * 1024
CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0),)
RPC_TIMEOUT_S = 60.0
RANGE_STRIDE, RANGE_SIZE = 100, 64
"""Session i guesses in RANGE_STRIDE*i+1 .. RANGE_STRIDE*i+RANGE_SIZE: disjoint ranges."""
RSS_BOUND_MIB = 8.0
"""Largest growth of a service's end-of-round memory over the warm-up round's that counts as flat.
Measured without leaks (2 cores): the EnvHost wanders within 4.4 MiB over 19 rounds of 256
sessions, the Scheduler within 1.3 MiB over 5 rounds of 1,000 jobs and 50 watchers. A leak
passes 8 MiB when it keeps one game process (~2.5 MiB each) per round, 16 KiB per session over
CI's two measured rounds of 256, or 2 KiB per job over the bench's four of 1,000; smaller leaks
are left to the exact counts (sessions, processes, streams, file descriptors)."""
UNPLACEABLE_DEVICES = 64
"""Trainer devices each queued job asks for on one worker (the most a spec may ask)."""


# -- processes: RSS and file descriptors ------------------------------------------------------

def _status_kib(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def children_by_parent() -> dict[int, list[int]]:
    """Every live process's children, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
    return children


def descendants(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """Every live descendant of `pid` (children, grandchildren, ...)."""
    children = children_by_parent() if children is None else children
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def _pss_bytes(pid: int) -> int:
    """Proportional set size: resident pages, each shared page divided among its sharers (forked
    game processes share most of their pages with their fork server)."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass(frozen=True, kw_only=True)
class ProcessSample:
    rss_bytes: int
    """VmRSS of the service's own process."""
    tree_pss_bytes: int
    """PSS of the process plus all its descendants (a service may run work in children): what
    "memory" means below."""
    children: int
    open_fds: int
    alive: bool = True


@dataclass(frozen=True)
class ProcessProbe:
    pid: int

    def sample(self, children: dict[int, list[int]] | None = None) -> ProcessSample:
        """Zeros and alive=False once the process is gone; `children`: a children_by_parent()
        already read."""
        try:
            fds = len(os.listdir(f"/proc/{self.pid}/fd"))
            rss, pss = _status_kib(self.pid, "VmRSS") * 1024, _pss_bytes(self.pid)
        except OSError:
            return ProcessSample(rss_bytes=0, tree_pss_bytes=0, children=0, open_fds=0, alive=False)
        kids = descendants(self.pid, children)
        for pid in kids:
            with contextlib.suppress(OSError):  # a child may exit meanwhile
                pss += _pss_bytes(pid)
        return ProcessSample(rss_bytes=rss, tree_pss_bytes=pss, children=len(kids), open_fds=fds)


@dataclass(kw_only=True)
class MemoryTrend:
    """End-of-round samples of one service, plus the highest memory seen at any sample."""

    name: str
    rounds: list[ProcessSample] = field(default_factory=list)
    peak_bytes: int = 0
    """Highest tree PSS sampled."""
    peak_rss_bytes: int = 0
    """Highest RSS of the service's own process sampled."""
    peak_children: int = 0

    def note(self, sample: ProcessSample, *, end_of_round: bool) -> None:
        self.peak_bytes = max(self.peak_bytes, sample.tree_pss_bytes)
        self.peak_rss_bytes = max(self.peak_rss_bytes, sample.rss_bytes)
        self.peak_children = max(self.peak_children, sample.children)
        if end_of_round:
            self.rounds.append(sample)

    @property
    def growth_bytes(self) -> int:
        """Highest end-of-round memory after the warm-up round minus the warm-up round's (0
        with fewer than two rounds)."""
        if len(self.rounds) < 2:
            return 0
        return max(s.tree_pss_bytes for s in self.rounds[1:]) - self.rounds[0].tree_pss_bytes

    @property
    def per_round_mib(self) -> list[float]:
        return [round(s.tree_pss_bytes / MiB, 1) for s in self.rounds]

    def flat(self, bound_bytes: int) -> bool:
        return self.growth_bytes < bound_bytes


@contextlib.asynccontextmanager
async def sampling(probes: dict[str, ProcessProbe], trends: dict[str, MemoryTrend], *,
                   interval_s: float = 0.1) -> AsyncIterator[None]:
    """Sample every probe about each `interval_s` while the body runs (peaks), then once more as
    the end of a round."""
    def sample_all() -> dict[str, ProcessSample]:
        children = children_by_parent()
        return {name: probe.sample(children) for name, probe in probes.items()}

    async def sample_forever() -> None:
        while True:
            started = time.monotonic()
            for name, sample in (await asyncio.to_thread(sample_all)).items():
                trends[name].note(sample, end_of_round=False)
            # reading hundreds of game processes' smaps costs CPU: keep it under ~1/5 of a core
            await asyncio.sleep(max(interval_s, 4 * (time.monotonic() - started)))

    sampler = asyncio.create_task(sample_forever())
    try:
        yield
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    for name, sample in sample_all().items():
        trends[name].note(sample, end_of_round=True)


# -- Prometheus metrics -----------------------------------------------------------------------

def scrape(metrics_url: str) -> str:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:  # noqa: S310 - loopback URL of the stack
        return response.read().decode()


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of every sample of `name` whose labels include `labels` (0 when there is none)."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


async def read_metric(metrics_url: str, name: str, **labels: str) -> float:
    return metric_sum(await asyncio.to_thread(scrape, metrics_url), name, **labels)


async def wait_for_metric(metrics_url: str, name: str, done: Callable[[float], bool], *, timeout_s: float = 15.0,
                          **labels: str) -> float:
    """Poll until `done(value)` (or the deadline: the caller judges the value); the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await read_metric(metrics_url, name, **labels)
        if done(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)


# -- EnvHost sessions -------------------------------------------------------------------------

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
            self.unexpected.append(f"Interact stream failed: {_rpc_text(error)}")
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
        report.problems.append(f"session {plan.index}: {type(error).__name__}: {_rpc_text(error)}")
        opened.abort()
        stepped.abort()
    if session_id:
        await _close_session(transport, plan, session_id, sent, report)


async def _close_session(transport: UnarySessions | InteractStream, plan: SessionPlan, session_id: str,
                         sent: int, report: SessionsReport) -> None:
    try:
        closed = await transport.call(env_pb.CloseSessionRequest(session_id=session_id))
    except (grpc.RpcError, RuntimeError, TimeoutError) as error:
        report.problems.append(f"session {plan.index}: CloseSession: {_rpc_text(error)}")
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


def _rpc_text(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error)


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


# -- queued jobs ------------------------------------------------------------------------------

def tiny_rl_spec(*, total_steps: int, seed: int = 3, **extra: Any) -> dict[str, Any]:
    """A valid RL job on the builtin tiny model that runs in seconds (`extra` adds spec fields)."""
    return {
        "type": "RL", "display_name": "load",
        "policy": {"model": {"builtin": {"name": "tiny-qwen2", "seed": seed}}, "adaptation": {"full": {}},
                   "algorithm": {"optimizer": {"learning_rate": 1e-3}},
                   "sampling": {"max_new_tokens": 4, "temperature": 1.0}},
        "environment": {"env_name": "math", "config": {"seed": seed, "eval_size": 2}},
        "training": {"total_steps": total_steps, "batch_size": 2, "group_size": 2, "eval_episodes": 2,
                     "seed": seed},
        **extra,
    }


def unplaceable_spec() -> dict[str, Any]:
    """Valid, but needs more trainer devices on one worker than any worker here offers."""
    return tiny_rl_spec(total_steps=1, resources=[{"role": "ROLE_TRAINER", "device_count": UNPLACEABLE_DEVICES}])


@dataclass(kw_only=True)
class JobsReport:
    jobs: int
    submitted: int = 0
    over_quota_refusal: str = ""
    listed: int = 0
    queued_seen: int = 0
    """Listed by ListJobs as QUEUED with one event, at a queue position of their own."""
    got_queued: int = 0
    """The same, read with GetJob (every check_every-th job)."""
    cancelled: int = 0
    events_checked: int = 0
    submit_seconds: float = 0.0
    seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    lost_ids: set[str] = field(default_factory=set)
    """Submitted jobs that some later check did not find as it should (listed, QUEUED,
    cancelled, their two events)."""
    problems: list[str] = field(default_factory=list)

    @property
    def submits_per_s(self) -> float:
        return self.submitted / self.submit_seconds if self.submit_seconds else 0.0

    @property
    def lost(self) -> int:
        return len(self.lost_ids)


@contextlib.contextmanager
def _timed(into: dict[str, float], name: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        into[name] = round(time.monotonic() - started, 2)


async def bounded_gather(calls: Iterable[Callable[[], Awaitable[Any]]], *, concurrency: int) -> list[Any]:
    """Run the calls with at most `concurrency` in flight; results (or exceptions) in order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await call()
    return await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)


class Scheduler:
    """The raw SchedulerService stub with one key's metadata (no client-side retries: every
    refusal or loss is seen as the service answered it)."""

    def __init__(self, channel: grpc.aio.Channel, api_key: str) -> None:
        self.stub = pb_grpc.SchedulerServiceStub(channel)
        self.metadata = bearer_metadata(api_key)

    async def __call__(self, method: str, request: Any) -> Any:
        return await getattr(self.stub, method)(request, metadata=self.metadata, timeout=RPC_TIMEOUT_S)

    async def events(self, job_id: str, *, after: int = 0) -> list[job_pb2.JobEvent]:
        """Every event WatchJob streams until the job's end (the stream then closes)."""
        call = self.stub.WatchJob(pb.WatchJobRequest(job_id=job_id, after_sequence=after), metadata=self.metadata)
        return [response.event async for response in call]

    async def list_all(self, *, page_size: int, states: Sequence[int] = ()) -> list[job_pb2.Job]:
        jobs, token = [], ""
        while True:
            page = await self("ListJobs", pb.ListJobsRequest(page_size=page_size, page_token=token, states=states))
            jobs.extend(page.jobs)
            token = page.next_page_token
            if not token:
                return jobs


async def new_tenant(admin: Scheduler, *, max_queued_jobs: int) -> tuple[str, str]:
    """A fresh tenant allowed exactly `max_queued_jobs` queued jobs: (tenant_id, its key)."""
    tenant_id = f"load-{uuid.uuid4().hex[:10]}"
    created = await admin("CreateTenant", pb.CreateTenantRequest(
        tenant_id=tenant_id, quota=quota(max_queued_jobs=max_queued_jobs), request_id=uuid.uuid4().hex))
    return tenant_id, created.api_key_secret


async def queued_jobs_load(address: str, api_key: str, *, jobs: int, concurrency: int = 16,
                           page_size: int = 100, check_every: int = 1) -> JobsReport:
    """`jobs` jobs queued for a fresh tenant, all found QUEUED by ListJobs, cancelled and found
    CANCELLED; every `check_every`-th one also read with GetJob while queued and its events
    replayed with WatchJob at the end (each CancelJob answer already shows the second event)."""
    report = JobsReport(jobs=jobs)
    started = time.monotonic()
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        tenant_id, tenant_key = await new_tenant(Scheduler(channel, api_key), max_queued_jobs=jobs)
        tenant = Scheduler(channel, tenant_key)
        with _timed(report.phase_seconds, "submit"):
            job_ids = await _submit_all(tenant, report, concurrency)
            report.over_quota_refusal = await _one_too_many(tenant)
        with _timed(report.phase_seconds, "list+get"):
            await _check_listed_and_queued(tenant, job_ids, report, concurrency, page_size, check_every)
        with _timed(report.phase_seconds, "cancel"):
            await _cancel_all(tenant, job_ids, report, concurrency)
        with _timed(report.phase_seconds, "verify"):
            await _check_cancelled(tenant, job_ids, report, concurrency, page_size, check_every)
        usage = (await Scheduler(channel, api_key)("GetTenant", pb.GetTenantRequest(tenant_id=tenant_id))).tenant.usage
        if usage.queued_jobs or usage.running_jobs:
            report.problems.append(f"tenant {tenant_id} still counts {usage.queued_jobs} queued and "
                                   f"{usage.running_jobs} running jobs after cancelling all")
    report.seconds = time.monotonic() - started
    return report


async def _submit_all(tenant: Scheduler, report: JobsReport, concurrency: int) -> list[str]:
    spec = submit_request(unplaceable_spec(), None).spec
    started = time.monotonic()
    answers = await bounded_gather(
        [lambda: tenant("SubmitJob", pb.SubmitJobRequest(request_id=uuid.uuid4().hex, spec=spec))
         for _ in range(report.jobs)], concurrency=concurrency)
    report.submit_seconds = time.monotonic() - started
    job_ids = []
    for answer in answers:
        if isinstance(answer, BaseException):
            report.problems.append(f"SubmitJob failed: {_rpc_text(answer)}")
        elif answer.job.state != S.STATE_QUEUED or not answer.created:
            report.problems.append(f"SubmitJob answered {S.State.Name(answer.job.state)} created={answer.created}")
        else:
            job_ids.append(answer.job.job_id)
    report.submitted = len(job_ids)
    if len(set(job_ids)) != len(job_ids):
        report.problems.append(f"SubmitJob returned {len(job_ids) - len(set(job_ids))} duplicate job ids")
    return job_ids


async def _one_too_many(tenant: Scheduler) -> str:
    """What a submit beyond the tenant's max_queued_jobs gets (it must be refused)."""
    spec = submit_request(unplaceable_spec(), None).spec
    try:
        answer = await tenant("SubmitJob", pb.SubmitJobRequest(request_id=uuid.uuid4().hex, spec=spec))
    except grpc.aio.AioRpcError as error:
        return error.code().name
    await tenant("CancelJob", pb.CancelJobRequest(job_id=answer.job.job_id, request_id=uuid.uuid4().hex))
    return "OK (accepted)"


async def _check_listed_and_queued(tenant: Scheduler, job_ids: list[str], report: JobsReport,
                                   concurrency: int, page_size: int, check_every: int) -> None:
    """Every job listed once, QUEUED with its first event at a queue position of its own; every
    `check_every`-th one read again with GetJob."""
    listed = await tenant.list_all(page_size=page_size)
    listed_ids = [job.job_id for job in listed]
    report.listed = len(set(listed_ids) & set(job_ids))
    if len(listed_ids) != len(set(listed_ids)):
        report.problems.append(f"ListJobs listed {len(listed_ids) - len(set(listed_ids))} jobs twice")
    report.lost_ids |= set(job_ids) - set(listed_ids)
    if set(listed_ids) != set(job_ids):
        report.problems.append(f"ListJobs: {len(set(job_ids) - set(listed_ids))} submitted jobs missing, "
                               f"{len(set(listed_ids) - set(job_ids))} unknown ones listed")
    report.queued_seen = _count_queued(listed, "ListJobs", report)
    sample = job_ids[::check_every]
    answers = await bounded_gather([lambda j=j: tenant("GetJob", pb.GetJobRequest(job_id=j)) for j in sample],
                                   concurrency=concurrency)
    got = []
    for job_id, answer in zip(sample, answers, strict=True):
        if isinstance(answer, BaseException):
            report.problems.append(f"GetJob {job_id}: {_rpc_text(answer)}")
            report.lost_ids.add(job_id)
        else:
            got.append(answer.job)
    report.got_queued = _count_queued(got, "GetJob", report)


def _count_queued(jobs: Sequence[job_pb2.Job], source: str, report: JobsReport) -> int:
    """How many of `jobs` are QUEUED with exactly one event and a queue position no other has;
    each other one is a problem (and lost)."""
    positions: dict[int, int] = {}
    for job in jobs:
        positions[job.queue_position] = positions.get(job.queue_position, 0) + 1
    good = 0
    for job in jobs:
        if job.state == S.STATE_QUEUED and job.last_event_sequence == 1 and job.queue_position >= 1 \
                and positions[job.queue_position] == 1:
            good += 1
        else:
            report.problems.append(f"{source} {job.job_id}: {S.State.Name(job.state)}, last event "
                                   f"{job.last_event_sequence}, queue position {job.queue_position} "
                                   f"(held by {positions[job.queue_position]} jobs)")
            report.lost_ids.add(job.job_id)
    return good


async def _cancel_all(tenant: Scheduler, job_ids: list[str], report: JobsReport, concurrency: int) -> None:
    answers = await bounded_gather(
        [lambda j=j: tenant("CancelJob", pb.CancelJobRequest(job_id=j, request_id=uuid.uuid4().hex, reason="load"))
         for j in job_ids], concurrency=concurrency)
    for job_id, answer in zip(job_ids, answers, strict=True):
        if isinstance(answer, BaseException):
            report.problems.append(f"CancelJob {job_id}: {_rpc_text(answer)}")
            report.lost_ids.add(job_id)
        elif answer.job.state != S.STATE_CANCELLED or answer.job.last_event_sequence != 2:
            report.problems.append(f"CancelJob {job_id} answered {S.State.Name(answer.job.state)}, last event "
                                   f"{answer.job.last_event_sequence}")
            report.lost_ids.add(job_id)
        else:
            report.cancelled += 1


async def _check_cancelled(tenant: Scheduler, job_ids: list[str], report: JobsReport, concurrency: int,
                           page_size: int, check_every: int) -> None:
    cancelled = {job.job_id for job in await tenant.list_all(page_size=page_size, states=[S.STATE_CANCELLED])}
    still_queued = await tenant.list_all(page_size=page_size, states=[S.STATE_QUEUED])
    report.lost_ids |= set(job_ids) - cancelled
    if cancelled != set(job_ids) or still_queued:
        report.problems.append(f"after cancelling: {len(set(job_ids) - cancelled)} jobs not listed CANCELLED, "
                               f"{len(still_queued)} listed QUEUED")
    replayed = job_ids[::check_every]
    replays = await bounded_gather([lambda j=j: tenant.events(j) for j in replayed], concurrency=concurrency)
    for job_id, events in zip(replayed, replays, strict=True):
        if isinstance(events, BaseException) or not _queued_then_cancelled(events):
            report.lost_ids.add(job_id)
        if isinstance(events, BaseException):
            report.problems.append(f"WatchJob {job_id}: {_rpc_text(events)}")
        elif not _queued_then_cancelled(events):
            found = [(e.sequence, e.WhichOneof("payload")) for e in events]
            report.problems.append(f"WatchJob {job_id}: events {found}")
        else:
            report.events_checked += 1


def _queued_then_cancelled(events: Sequence[job_pb2.JobEvent]) -> bool:
    return [e.sequence for e in events] == [1, 2] and transitions(events) == [
        (S.STATE_UNSPECIFIED, S.STATE_QUEUED), (S.STATE_QUEUED, S.STATE_CANCELLED)]


def transitions(events: Sequence[job_pb2.JobEvent]) -> list[tuple[int, int]]:
    return [(e.state_changed.from_state, e.state_changed.to_state) for e in events
            if e.WhichOneof("payload") == "state_changed"]


# -- watchers of one job ----------------------------------------------------------------------

@dataclass(kw_only=True)
class WatchersReport:
    watchers: int
    job_id: str = ""
    final_state: str = ""
    events: int = 0
    """Events of the job (its last sequence)."""
    identical_watchers: int = 0
    """Watchers that received exactly the complete sequence 1..last."""
    resumed_ok: int = 0
    resume_points: list[int] = field(default_factory=list)
    watch_streams_closed: float = 0
    """WatchJob streams the Scheduler counted as ended during the load (its metrics)."""
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def lost_events(self) -> int:
        return (self.watchers - self.identical_watchers) + (len(self.resume_points) - self.resumed_ok)


async def _watch_on_own_channel(address: str, api_key: str, job_id: str) -> list[job_pb2.JobEvent]:
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        return await Scheduler(channel, api_key).events(job_id)


async def _watch_with_a_gap(address: str, api_key: str, job_id: str, hang_up_after: int) -> tuple[int, list]:
    """Read `hang_up_after` events, hang up, wait until the job has moved on (or ended), resume
    with after_sequence on a new channel: (where it resumed, every event it got)."""
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        scheduler = Scheduler(channel, api_key)
        call = scheduler.stub.WatchJob(pb.WatchJobRequest(job_id=job_id), metadata=scheduler.metadata)
        head = []
        async for response in call:
            head.append(response.event)
            if len(head) == hang_up_after:
                break
        call.cancel()
        resume_at = head[-1].sequence if head else 0
        await _until_job_passes(scheduler, job_id, resume_at + 3)
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        return resume_at, head + await Scheduler(channel, api_key).events(job_id, after=resume_at)


async def _until_job_passes(scheduler: Scheduler, job_id: str, sequence: int, *, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = (await scheduler("GetJob", pb.GetJobRequest(job_id=job_id))).job
        if job.last_event_sequence >= sequence or job.state in (S.STATE_SUCCEEDED, S.STATE_FAILED, S.STATE_CANCELLED):
            return
        await asyncio.sleep(0.1)


def _fingerprint(events: Sequence[job_pb2.JobEvent]) -> list[bytes]:
    return [e.SerializeToString(deterministic=True) for e in events]


async def gather_within(tasks: Sequence[asyncio.Task[Any]], timeout_s: float) -> list[Any]:
    """Each task's result or exception, in order; a task still running after `timeout_s` is
    cancelled and gives a TimeoutError."""
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return [TimeoutError(f"still running after {timeout_s:g} s") if task in pending
            else (task.exception() or task.result()) for task in tasks]


async def watchers_load(address: str, api_key: str, *, watchers: int, metrics_url: str, total_steps: int = 2,
                        resume_points: Sequence[int] = (2, 5), timeout_s: float = 300) -> WatchersReport:
    """One tiny RL job watched by `watchers` streams from its submission, plus one watcher per
    entry of `resume_points` that hangs up after that many events and resumes; a watcher not
    done within `timeout_s` is a problem."""
    report = WatchersReport(watchers=watchers, resume_points=list(resume_points))
    started = time.monotonic()
    before = await read_metric(metrics_url, "opentinker_grpc_requests_total", grpc_method="WatchJob")
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        scheduler = Scheduler(channel, api_key)
        job = (await scheduler("SubmitJob", submit_request(tiny_rl_spec(total_steps=total_steps), None))).job
        report.job_id = job.job_id
        full = [asyncio.create_task(_watch_on_own_channel(address, api_key, job.job_id)) for _ in range(watchers)]
        gapped = [asyncio.create_task(_watch_with_a_gap(address, api_key, job.job_id, n)) for n in resume_points]
        results = await gather_within(full, timeout_s)
        resumed = await gather_within(gapped, timeout_s)
        final = (await scheduler("GetJob", pb.GetJobRequest(job_id=job.job_id))).job
    report.final_state = S.State.Name(final.state)
    report.events = final.last_event_sequence
    reference = _check_watchers(results, final, report)
    _check_resumed(resumed, reference, report)
    report.seconds = time.monotonic() - started
    opened = watchers + 2 * len(resume_points)  # a resuming watcher opens two streams
    after = await wait_for_metric(metrics_url, "opentinker_grpc_requests_total",
                                  lambda value: value >= before + opened, grpc_method="WatchJob")
    report.watch_streams_closed = after - before
    if report.watch_streams_closed != opened:
        report.problems.append(f"the Scheduler closed {report.watch_streams_closed:g} WatchJob streams, "
                               f"{opened} were opened")
    return report


def _check_watchers(results: Sequence[Any], final: job_pb2.Job, report: WatchersReport) -> list[bytes]:
    """Every watcher's events against 1..last ending in the job's final state; the reference
    sequence (the first complete one)."""
    reference: list[bytes] = []
    if final.state != S.STATE_SUCCEEDED:
        report.problems.append(f"the watched job ended {report.final_state}: {final.status_message}")
    for index, events in enumerate(results):
        if isinstance(events, BaseException):
            report.problems.append(f"watcher {index}: {_rpc_text(events)}")
            continue
        sequences = [e.sequence for e in events]
        ends_as_the_job = bool(events) and events[-1].WhichOneof("payload") == "state_changed" \
            and events[-1].state_changed.to_state == final.state
        complete = ends_as_the_job and sequences == list(range(1, final.last_event_sequence + 1))
        reference = reference or (_fingerprint(events) if complete else [])
        if complete and _fingerprint(events) == reference:
            report.identical_watchers += 1
        else:
            report.problems.append(f"watcher {index}: got {len(events)} events (sequences {_ranges(sequences)}), "
                                   f"expected 1..{final.last_event_sequence} like the others")
    return reference


def _check_resumed(resumed: Sequence[Any], reference: list[bytes], report: WatchersReport) -> None:
    for result in resumed:
        if isinstance(result, BaseException):
            report.problems.append(f"resuming watcher: {_rpc_text(result)}")
            continue
        resume_at, events = result
        if reference and _fingerprint(events) == reference:
            report.resumed_ok += 1
        else:
            report.problems.append(f"watcher resumed after {resume_at}: sequences "
                                   f"{_ranges([e.sequence for e in events])}, not the full stream")


def _ranges(sequences: Sequence[int]) -> str:
    """[1, 2, 3, 5, 5] -> '1-3,5,5' (gaps and repeats visible)."""
    parts, start = [], None
    for i, value in enumerate(sequences):
        start = value if start is None else start
        if i + 1 == len(sequences) or sequences[i + 1] != value + 1:
            parts.append(str(value) if start == value else f"{start}-{value}")
            start = None
    return ",".join(parts) or "none"
