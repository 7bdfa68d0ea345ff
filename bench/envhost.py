"""EnvHost steps/s over the Interact stream vs a bare gRPC echo service with the same stream shape,
with games in processes (the default: the bench's sessions share a job, so 16 share a process)
and in the EnvHost's threads.

    .venv/bin/python bench/envhost.py            # 64 sessions, 5 rounds x 3 s per target (~1.7 min)
    .venv/bin/python bench/envhost.py --quick    # 1 round x 1 s: a smoke run (~15 s)

What runs, all on this machine:

* the EnvHost as two real processes (`python -m opentinker_envhost`, OPENTINKER_AUTH=disabled,
  OPENTINKER_ENVHOST_GAMES serving bench/_envhost_games.py by import path: `trivial`, a sync
  AbstractGame, and `trivial-async`, the same game as an AsyncAbstractGame; its scheduler
  address points at a free port, so it registers nowhere and retries in the background): one
  with the default OPENTINKER_ENVHOST_ISOLATION=process (games in processes forked by the
  EnvHost's fork server; the bench's sessions share one job, so up to 16 share a process and
  their steps reach it in batches: OPENTINKER_ENVHOST_SESSIONS_PER_PROCESS) and one with
  isolation=thread (games in the EnvHost's worker threads);
* the baseline, bench/_echo_server.py, also a process: a bare grpc.aio server implementing
  EnvHostService/Interact itself, answering every request inline with a response of the same
  kind and size (no sessions, tasks, threads, game calls or Struct conversions). Both servers
  get the same grpc server options (opentinker_runtime.core.server.SERVER_OPTIONS) and no interceptors.
* the client, in this process: --sessions (64) concurrent sessions, asyncio tasks sharing
  --channels grpc.aio channels (default 1 per server, like the Rollout's EnvHostChannels, which
  shares one channel per EnvHost address among all its episodes). Every session is its own
  Interact stream (HTTP/2 streams multiplexed on the channel): OpenSession then Reset, then
  Step after Step in ping-pong (write one request, read its response, which must carry the same
  sequence and a step result) until the round ends, then CloseSession (which must report the
  number of steps the session sent) and end of stream (status OK).

The measured targets are `echo`, `envhost` (sync game in a shared process: the default),
`envhost-thread` (sync game in an EnvHost worker thread) and `envhost-async` (async game in a
shared process). Each of --rounds rounds measures every target once, the order rotating from round
to round (so drifts in the machine's load hit all alike); a round opens the sessions, plays
--warmup seconds unmeasured, then counts the steps whose response arrives within the next
--seconds. Reported per target: medians over rounds of steps/s, per-step latency p50/p99
(client-side, write to read, ms), CPU seconds of the server (the EnvHost process and all its
descendants: fork server and game processes; /proc) and of this client process within the
measured window, CPU microseconds per step (`main us/step`: the EnvHost's own process alone, without
its game processes), and the time to open and reset all the sessions at
once per session: in the first round (process mode: a fork per process) and in the later rounds
(process mode: every session opens with the same job id, so it is built in a warm process the
previous round's closed session left; see opentinker_envhost.sandbox_pool); and, after each
round, the open + reset latency of a session opened alone (ONE_AT_A_TIME each: with the job id,
so in a warm process; and without a job, so in a new process: a fork). ratio = the median over
rounds of a target's steps/s over the echo's steps/s in the same round (a round measures the
targets back to back, so each ratio pairs measurements seconds apart; this machine's speed drifts
by up to a third between rounds, which a ratio of medians over the whole run would carry; that
one is printed too); the target is >= 0.80 for the default (process) mode's sync game (the other
ratios are shown too). `isolation` compares the two modes: process/thread steps/s, server CPU per step and
p50 latency (the cost of the process boundary per step).

All processes share this machine's cores: on a 2-core box client and server compete, so read
the CPU columns (a client near 1 CPU s per second is itself a bottleneck) and the load average.

Results: a table on stdout, progress on stderr, JSON in bench/results/envhost.json (--out).
Exit status 1 when the run fails (a server did not start or died, a step got no answer or an
error, a stream ended badly, no step was measured); a MISS against the target is printed but
does not fail the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import __version__ as protobuf_version
from google.protobuf.internal import api_implementation
from grpc_health.v1 import health_pb2, health_pb2_grpc

from _envhost_games import OBSERVATION, games_setting
from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.embedded_redis import free_port

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
DEFAULT_OUT = BENCH_DIR / "results" / "envhost.json"
ECHO_SCRIPT = BENCH_DIR / "_echo_server.py"
TARGET_RATIO = 0.80
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
CALL_TIMEOUT_S = 30.0
"""Longest one request (open, reset, step, close) may wait for its answer before the run fails."""
ACTION = "go"
ONE_AT_A_TIME = 5
"""Sessions each round opens one after the other per kind (warm, cold) to time open + reset alone."""

ECHO, ENVHOST, ENVHOST_THREAD, ENVHOST_ASYNC = "echo", "envhost", "envhost-thread", "envhost-async"
GAME_OF = {ECHO: "trivial", ENVHOST: "trivial", ENVHOST_THREAD: "trivial", ENVHOST_ASYNC: "trivial-async"}
"""env_name each target's sessions open (the echo server ignores it)."""
SERVER_OF = {ECHO: ECHO, ENVHOST: ENVHOST, ENVHOST_THREAD: ENVHOST_THREAD, ENVHOST_ASYNC: ENVHOST}
ISOLATION_OF = {ENVHOST: "process", ENVHOST_THREAD: "thread"}
"""OPENTINKER_ENVHOST_ISOLATION of each EnvHost server process."""


class BenchFailure(Exception):
    """The run failed (not a missed target): the bench exits 1."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    sessions: int
    seconds: float
    warmup: float
    rounds: int
    channels: int
    include_async: bool
    out: Path
    quick: bool
    label: str

    @property
    def targets(self) -> tuple[str, ...]:
        return (ECHO, ENVHOST, ENVHOST_THREAD, *((ENVHOST_ASYNC,) if self.include_async else ()))


def parse_args(argv: list[str] | None) -> BenchConfig:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=64, help="concurrent sessions (one Interact stream each)")
    p.add_argument("--seconds", type=float, default=None,
                   help="measured seconds per round and target (default 3; 1 with --quick)")
    p.add_argument("--warmup", type=float, default=None,
                   help="unmeasured seconds of play before each measurement (default 1; 0.3 with --quick)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds; each measures every target once (default 5; 1 with --quick)")
    p.add_argument("--channels", type=int, default=1,
                   help="grpc.aio channels per server the sessions share round-robin (default 1)")
    p.add_argument("--no-async", dest="include_async", action="store_false",
                   help="skip the async-game target (envhost-async)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 round x 1 s per target")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    p.add_argument("--label", default="", help="free text saved with the results (e.g. which code was measured)")
    a = p.parse_args(argv)
    seconds = a.seconds if a.seconds is not None else (1.0 if a.quick else 3.0)
    warmup = a.warmup if a.warmup is not None else (0.3 if a.quick else 1.0)
    rounds = a.rounds if a.rounds is not None else (1 if a.quick else 5)
    if a.sessions < 1 or rounds < 1 or a.channels < 1:
        p.error("--sessions, --rounds and --channels must be >= 1")
    if seconds <= 0 or warmup < 0:
        p.error("--seconds must be > 0 and --warmup >= 0")
    return BenchConfig(sessions=a.sessions, seconds=seconds, warmup=warmup, rounds=rounds,
                       channels=a.channels, include_async=a.include_async, out=a.out, quick=a.quick,
                       label=a.label)


# ---------------------------------------------------------------------------------------------
# Numbers


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads, exited ones included), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """`pid` and its live descendants (an EnvHost's fork server and game processes), from /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            parents.setdefault(parent, []).append(int(stat.parent.name))
    tree, queue = [], [pid]
    while queue:
        current = queue.pop()
        tree.append(current)
        queue.extend(parents.get(current, []))
    return tree


def tree_cpu_seconds(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return float(ordered[int(rank) - 1])


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def load_note() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


# ---------------------------------------------------------------------------------------------
# Server processes


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the bench dies (Linux; elsewhere a no-op)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment minus OPENTINKER_* settings, bench/ first on PYTHONPATH, plus `extra`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENTINKER_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {**env, **extra}


@dataclass
class ServerProcess:
    name: str
    command: list[str]
    env: dict[str, str]
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        with self.log_path.open("wb") as log_file:
            self.process = subprocess.Popen(self.command, env=self.env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                            stdout=log_file, stderr=subprocess.STDOUT,
                                            preexec_fn=_die_with_parent)

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def check_alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise BenchFailure(f"{self.name} server exited ({code}); its log ends:\n{self.log_tail()}")

    def wait_serving(self, timeout: float) -> float:
        """Poll grpc.health.v1 until SERVING; the seconds it took."""
        started = time.monotonic()
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() - started < timeout:
                self.check_alive()
                with contextlib.suppress(grpc.RpcError):
                    answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return time.monotonic() - started
                time.sleep(0.1)
        raise BenchFailure(f"{self.name} server not SERVING after {timeout:g}s; its log ends:\n{self.log_tail()}")

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def envhost_process(name: str, log_dir: Path, nowhere: int) -> ServerProcess:
    """An EnvHost serving the bench games with isolation ISOLATION_OF[name]."""
    port = free_port()
    return ServerProcess(
        name=name, command=[sys.executable, "-m", "opentinker_envhost"], port=port,
        log_path=log_dir / f"{name}.log",
        env=clean_environment(OPENTINKER_AUTH="disabled", OPENTINKER_ENVHOST_PORT=str(port),
                              OPENTINKER_ENVHOST_HOST="127.0.0.1", OPENTINKER_ENVHOST_GAMES=games_setting(),
                              OPENTINKER_ENVHOST_ISOLATION=ISOLATION_OF[name],
                              OPENTINKER_ENVHOST_SCHEDULER_ADDRESS=f"127.0.0.1:{nowhere}"))


def server_processes(log_dir: Path) -> dict[str, ServerProcess]:
    echo_port, nowhere = free_port(), free_port()
    echo = ServerProcess(name=ECHO, command=[sys.executable, str(ECHO_SCRIPT), "--port", str(echo_port)],
                         port=echo_port, log_path=log_dir / "echo.log", env=clean_environment())
    return {ENVHOST: envhost_process(ENVHOST, log_dir, nowhere),
            ENVHOST_THREAD: envhost_process(ENVHOST_THREAD, log_dir, nowhere), ECHO: echo}


# ---------------------------------------------------------------------------------------------
# The client


@dataclass
class Session:
    """One session on its own Interact stream, played in ping-pong."""

    target: str
    stub: pb_grpc.EnvHostServiceStub
    env_name: str
    job_id: str = "bench-envhost"
    call: Any = None
    session_id: str = ""
    sequence: int = 0
    steps_sent: int = 0
    steps_answered: int = 0
    window_steps: int = 0
    latencies_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    async def request(self, **action: Any) -> pb.InteractResponse:
        """Send one request and read its answer (exactly one, with the same sequence)."""
        self.sequence += 1
        await self.call.write(pb.InteractRequest(sequence=self.sequence, **action))
        response = await self.call.read()
        if response is grpc.aio.EOF:
            raise BenchFailure(f"{self.target}: the stream ended before answering request {self.sequence}")
        if response.sequence != self.sequence:
            raise BenchFailure(f"{self.target}: request {self.sequence} answered with sequence "
                               f"{response.sequence}")
        return response

    def expect(self, response: pb.InteractResponse, kind: str) -> None:
        got = response.WhichOneof("result")
        if got != kind:
            detail = f": {response.error.message}" if got == "error" else ""
            raise BenchFailure(f"{self.target}: {kind} answered with {got}{detail}")

    async def open(self) -> None:
        self.call = self.stub.Interact(timeout=None)
        opened = await self.request(open_session=pb.OpenSessionRequest(
            env_name=self.env_name, request_id=uuid.uuid4().hex, job_id=self.job_id))
        self.expect(opened, "open_session")
        self.session_id = opened.open_session.session_id
        self.expect(await self.request(reset=pb.ResetRequest(session_id=self.session_id)), "reset")

    async def play(self, start: float, end: float) -> None:
        """Step until the first answer at or after `end`; answers in [start, end) are counted."""
        step = pb.StepRequest(session_id=self.session_id, action=ACTION)
        clock = time.perf_counter
        while True:
            sent = clock()
            self.steps_sent += 1
            response = await self.request(step=step)
            received = clock()
            if response.WhichOneof("result") == "step" and response.step.observation == OBSERVATION:
                self.steps_answered += 1
            elif len(self.errors) < 5:
                self.errors.append(str(response.error.message if response.HasField("error") else response)[:300])
            if received >= end:
                return
            if received >= start:
                self.window_steps += 1
                self.latencies_s.append(received - sent)

    async def close(self) -> None:
        closed = await self.request(close_session=pb.CloseSessionRequest(session_id=self.session_id))
        self.expect(closed, "close_session")
        if closed.close_session.steps != self.steps_answered:
            self.errors.append(f"CloseSession reported {closed.close_session.steps} steps served, "
                               f"the client had {self.steps_answered} answered")
        await self.call.done_writing()
        if (extra := await self.call.read()) is not grpc.aio.EOF:
            self.errors.append(f"an answer after the stream's last request: {extra}")
        if (code := await self.call.code()) != grpc.StatusCode.OK:
            self.errors.append(f"stream ended with {code.name}: {await self.call.details()}")


async def within(awaitable: Any, seconds: float, what: str) -> Any:
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        raise BenchFailure(f"{what} took longer than {seconds:g}s") from None
    except grpc.aio.AioRpcError as error:
        raise BenchFailure(f"{what}: {error.code().name}: {error.details()}") from None


async def open_one_at_a_time(stub: pb_grpc.EnvHostServiceStub, target: str, job_id: str) -> list[float]:
    """Open + reset latency (ms) of ONE_AT_A_TIME sessions opened, reset and closed one after the
    other. With the bench's job id a process-isolated session is built in a warm process (the
    round's sessions just closed); with none ("") in a new one (a fork; it exits at close)."""
    latencies = []
    for _ in range(ONE_AT_A_TIME):
        session = Session(target=target, stub=stub, env_name=GAME_OF[target], job_id=job_id)
        started = time.perf_counter()
        await session.open()
        latencies.append((time.perf_counter() - started) * 1000)
        await session.close()
        if session.errors:
            raise BenchFailure(f"{target}: a session opened alone: {session.errors[0]}")
    return latencies


async def measure(target: str, server: ServerProcess, config: BenchConfig, round_index: int) -> dict[str, Any]:
    """One round of one target: open, warm up, measure, close."""
    channels = [grpc.aio.insecure_channel(server.address) for _ in range(config.channels)]
    try:
        stubs = [pb_grpc.EnvHostServiceStub(channel) for channel in channels]
        sessions = [Session(target=target, stub=stubs[i % len(stubs)], env_name=GAME_OF[target])
                    for i in range(config.sessions)]
        clock = time.perf_counter
        opening = clock()
        await within(asyncio.gather(*(s.open() for s in sessions)), CALL_TIMEOUT_S,
                     f"{target}: opening {config.sessions} sessions")
        open_s = clock() - opening
        start = clock() + config.warmup
        end = start + config.seconds
        cpu: dict[str, float] = {}

        async def sample_cpu() -> None:
            await asyncio.sleep(max(0.0, start - clock()))
            pids = process_tree(server.pid)
            cpu["server0"], cpu["client0"], cpu["t0"] = tree_cpu_seconds(pids), time.process_time(), clock()
            cpu["main0"] = cpu_seconds(server.pid)
            await asyncio.sleep(max(0.0, end - clock()))
            cpu["server1"], cpu["client1"], cpu["t1"] = tree_cpu_seconds(pids), time.process_time(), clock()
            cpu["main1"] = cpu_seconds(server.pid)
            cpu["server_processes"] = len(pids)

        play_timeout = config.warmup + config.seconds + CALL_TIMEOUT_S
        await within(asyncio.gather(sample_cpu(), *(s.play(start, end) for s in sessions)), play_timeout,
                     f"{target}: playing")
        await within(asyncio.gather(*(s.close() for s in sessions)), CALL_TIMEOUT_S,
                     f"{target}: closing the sessions")
        one_at_a_time = {kind: await within(open_one_at_a_time(stubs[0], target, job_id), CALL_TIMEOUT_S,
                                            f"{target}: opening sessions one at a time")
                         for kind, job_id in (("warm", "bench-envhost"), ("cold", ""))}
    finally:
        for channel in channels:
            await channel.close()
    server.check_alive()
    latencies_ms = [s * 1000 for session in sessions for s in session.latencies_s]
    steps = sum(s.window_steps for s in sessions)
    server_cpu = cpu["server1"] - cpu["server0"]
    main_cpu = cpu["main1"] - cpu["main0"]
    client_cpu = cpu["client1"] - cpu["client0"]
    window = cpu["t1"] - cpu["t0"]
    errors = [f"{target} session {i}: {e}" for i, s in enumerate(sessions) for e in s.errors]
    return {
        "target": target, "round": round_index, "sessions": config.sessions, "seconds": config.seconds,
        "steps": steps, "steps_per_s": steps / config.seconds,
        "latency_ms": {"p50": percentile(latencies_ms, 50), "p90": percentile(latencies_ms, 90),
                       "p99": percentile(latencies_ms, 99), "max": max(latencies_ms, default=None),
                       "mean": statistics.fmean(latencies_ms) if latencies_ms else None},
        "server_cpu_s": server_cpu, "client_cpu_s": client_cpu, "cpu_window_s": window,
        "server_processes": cpu["server_processes"],
        "open_ms_per_session": open_s / config.sessions * 1000,
        "open_one_ms": one_at_a_time,
        "server_cpu_us_per_step": server_cpu / steps * 1e6 if steps else None,
        "server_main_cpu_us_per_step": main_cpu / steps * 1e6 if steps else None,
        "client_cpu_us_per_step": client_cpu / steps * 1e6 if steps else None,
        "steps_sent": sum(s.steps_sent for s in sessions),
        "steps_answered": sum(s.steps_answered for s in sessions),
        "errors": errors,
    }


async def run_rounds(config: BenchConfig, servers: dict[str, ServerProcess]) -> list[dict[str, Any]]:
    runs = []
    targets = config.targets
    for round_index in range(config.rounds):
        shift = round_index % len(targets)
        for target in targets[shift:] + targets[:shift]:
            print(f"round {round_index + 1}/{config.rounds}: {target} ...", file=sys.stderr, flush=True)
            result = await measure(target, servers[SERVER_OF[target]], config, round_index)
            print(f"  {result['steps_per_s']:,.0f} steps/s, p50 {fmt(result['latency_ms']['p50'], 2)} ms, "
                  f"server CPU {result['server_cpu_s']:.2f} s", file=sys.stderr, flush=True)
            runs.append(result)
    return runs


# ---------------------------------------------------------------------------------------------
# Report


def summarize(runs: list[dict[str, Any]], config: BenchConfig) -> dict[str, Any]:
    summary = {}
    for target in config.targets:
        mine = [r for r in runs if r["target"] == target]
        summary[target] = {
            "steps_per_s": median([r["steps_per_s"] for r in mine]),
            "steps_per_s_by_round": [r["steps_per_s"] for r in mine],
            "latency_p50_ms": median([r["latency_ms"]["p50"] for r in mine]),
            "latency_p99_ms": median([r["latency_ms"]["p99"] for r in mine]),
            "server_cpu_s": median([r["server_cpu_s"] for r in mine]),
            "server_cpu_us_per_step": median([r["server_cpu_us_per_step"] for r in mine]),
            "server_main_cpu_us_per_step": median([r["server_main_cpu_us_per_step"] for r in mine]),
            "client_cpu_s": median([r["client_cpu_s"] for r in mine]),
            "client_cpu_us_per_step": median([r["client_cpu_us_per_step"] for r in mine]),
            "open_ms_per_session": median([r["open_ms_per_session"] for r in mine]),
            "open_ms_per_session_first_round": median([r["open_ms_per_session"] for r in mine if r["round"] == 0]),
            "open_ms_per_session_later_rounds": median([r["open_ms_per_session"] for r in mine if r["round"] > 0]),
            "open_one_ms_warm": median([v for r in mine for v in r["open_one_ms"]["warm"]]),
            "open_one_ms_cold": median([v for r in mine for v in r["open_one_ms"]["cold"]]),
            "steps": sum(r["steps"] for r in mine),
            "steps_sent": sum(r["steps_sent"] for r in mine),
            "steps_answered": sum(r["steps_answered"] for r in mine),
        }
    return summary


def ratios(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each target's ratio to the echo: the median over rounds of its steps/s over the echo's in
    the same round (the nearest baseline in time: this machine's speed drifts between rounds)."""
    return {target: median(by_round) if (by_round := round_ratios(runs, target)) else None
            for target in (ENVHOST, ENVHOST_THREAD, ENVHOST_ASYNC) if any(r["target"] == target for r in runs)}


def round_ratios(runs: list[dict[str, Any]], target: str) -> list[float]:
    """`target`'s steps/s over the echo's, round by round."""
    echo = {r["round"]: r["steps_per_s"] for r in runs if r["target"] == ECHO}
    return [r["steps_per_s"] / echo[r["round"]] for r in runs
            if r["target"] == target and echo.get(r["round"])]


def ratios_of_medians(summary: dict[str, Any]) -> dict[str, float | None]:
    """Median steps/s over the echo's median steps/s (shown beside the paired ratio)."""
    echo = summary[ECHO]["steps_per_s"]
    return {target: (summary[target]["steps_per_s"] / echo if echo else None)
            for target in (ENVHOST, ENVHOST_THREAD, ENVHOST_ASYNC) if target in summary}


def isolation_cost(summary: dict[str, Any]) -> dict[str, float | None]:
    """Process vs thread isolation of the same sync game: steps/s ratio, server CPU per step
    (both modes and their ratio) and the p50 latency the process boundary adds."""
    process, thread = summary[ENVHOST], summary[ENVHOST_THREAD]

    def ratio(key: str) -> float | None:
        return process[key] / thread[key] if process[key] is not None and thread[key] else None

    added = (process["latency_p50_ms"] - thread["latency_p50_ms"]
             if process["latency_p50_ms"] is not None and thread["latency_p50_ms"] is not None else None)
    return {"steps_per_s_process_over_thread": ratio("steps_per_s"),
            "server_cpu_us_per_step_process": process["server_cpu_us_per_step"],
            "server_cpu_us_per_step_thread": thread["server_cpu_us_per_step"],
            "server_cpu_per_step_process_over_thread": ratio("server_cpu_us_per_step"),
            "latency_p50_added_ms": added}


def failures(runs: list[dict[str, Any]]) -> list[str]:
    problems = []
    for r in runs:
        where = f"round {r['round'] + 1} {r['target']}"
        if r["steps"] == 0:
            problems.append(f"{where}: no step answered within the measured window")
        if r["steps_answered"] != r["steps_sent"]:
            problems.append(f"{where}: {r['steps_answered']}/{r['steps_sent']} steps answered with a step result")
        problems.extend(f"{where}: {e}" for e in r["errors"][:10])
    return problems


def print_report(results: dict[str, Any], config: BenchConfig) -> None:
    summary = results["summary"]
    print(f"\nInteract stream, {config.sessions} sessions in ping-pong on {config.channels} channel(s) per "
          f"server; median of {config.rounds} round(s) x {config.seconds:g} s (after {config.warmup:g} s warm-up)")
    print(f"{'target':14} {'steps/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'srv CPU s':>9} {'srv us/step':>11} "
          f"{'main us/step':>12} {'cli CPU s':>9} {'cli us/step':>11}")
    for target, s in summary.items():
        print(f"{target:14} {fmt(s['steps_per_s'], 0):>9} {fmt(s['latency_p50_ms'], 2):>7} "
              f"{fmt(s['latency_p99_ms'], 2):>7} {fmt(s['server_cpu_s'], 2):>9} "
              f"{fmt(s['server_cpu_us_per_step'], 1):>11} {fmt(s['server_main_cpu_us_per_step'], 1):>12} "
              f"{fmt(s['client_cpu_s'], 2):>9} "
              f"{fmt(s['client_cpu_us_per_step'], 1):>11}")
    print("open + reset, ms per session (all opened at once): " + ", ".join(
        f"{t} {fmt(s['open_ms_per_session'], 2)}" for t, s in summary.items()))
    print("  first round (process mode: a fork each): " + ", ".join(
        f"{t} {fmt(s['open_ms_per_session_first_round'], 2)}" for t, s in summary.items()))
    print("  later rounds (process mode: warm processes): " + ", ".join(
        f"{t} {fmt(s['open_ms_per_session_later_rounds'], 2)}" for t, s in summary.items()))
    print("open + reset of one session at a time, median ms: " + ", ".join(
        f"{t} {fmt(s['open_one_ms_warm'], 2)} with the job id (process mode: a warm process) / "
        f"{fmt(s['open_one_ms_cold'], 2)} without (a fork)" for t, s in summary.items()))
    print("steps/s by round: " + "; ".join(
        f"{t} " + ", ".join(f"{v:,.0f}" for v in s["steps_per_s_by_round"]) for t, s in summary.items()))
    for target, ratio in results["ratios"].items():
        by_round = ", ".join(f"{v:.3f}" for v in results["round_ratios"][target])
        print(f"ratio {target}/echo: {fmt(ratio, 3)} (median of rounds: {by_round}; "
              f"median over median: {fmt(results['ratios_of_medians'][target], 3)})")
    cost = results["isolation"]
    print(f"isolation process/thread: steps/s {fmt(cost['steps_per_s_process_over_thread'], 3)}, server CPU "
          f"per step {fmt(cost['server_cpu_us_per_step_process'], 1)} vs "
          f"{fmt(cost['server_cpu_us_per_step_thread'], 1)} us "
          f"({fmt(cost['server_cpu_per_step_process_over_thread'], 2)}x), p50 latency "
          f"{fmt(cost['latency_p50_added_ms'], 3)} ms added")
    print(f"{results['load_before']} before, {results['load_after']} after")
    target = results["target"]
    print(f"\n{'PASS' if target['pass'] else 'MISS'}  {target['description']}: {target['measured']}")


def environment() -> dict[str, Any]:
    spec = importlib.util.find_spec("opentinker_envhost")
    package = str(Path(spec.origin).parent) if spec and spec.origin else ""
    commit, dirty = "", False
    if package.startswith(str(ROOT)):  # else the code measured is not this checkout's
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            git = ["git", "--no-optional-locks"]
            commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                    text=True, timeout=10).stdout.strip()
            dirty = bool(subprocess.run([*git, "status", "--porcelain", "--", "services/envhost"], cwd=ROOT,
                                        capture_output=True, text=True, timeout=10).stdout.strip())
    return {"envhost_package": package, "git_commit": commit, "envhost_uncommitted_changes": dirty,
            "python": platform.python_version(), "grpc": grpc.__version__, "protobuf": protobuf_version,
            "protobuf_implementation": api_implementation.Type(), "cpus": os.cpu_count(),
            "platform": platform.platform()}


def interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    signal.signal(signal.SIGTERM, interrupt)  # stop the servers on SIGTERM too
    results: dict[str, Any] = {
        "label": config.label,
        "config": {**{k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
                   "targets": list(config.targets), "games": games_setting(), "action": ACTION,
                   "observation": OBSERVATION,
                   "client": "asyncio tasks in the bench process, one Interact stream per session, "
                             f"{config.channels} grpc.aio channel(s) per server shared round-robin"},
        "environment": environment(), "load_before": load_note()}
    with tempfile.TemporaryDirectory(prefix="bench-envhost-") as log_dir:
        servers = server_processes(Path(log_dir))
        exit_codes: dict[str, int | None] = {}
        try:
            print("starting the EnvHost and echo server processes ...", file=sys.stderr, flush=True)
            for server in servers.values():
                server.start()
            results["startup_s"] = {name: round(server.wait_serving(START_TIMEOUT_S), 2)
                                    for name, server in servers.items()}
            runs = asyncio.run(run_rounds(config, servers))
        except BenchFailure as error:
            print(f"FAILED: {error}", file=sys.stderr)
            return 1
        finally:
            for name, server in servers.items():
                exit_codes[name] = server.stop()
    results["server_exit_codes"] = exit_codes
    results["load_after"] = load_note()
    results["runs"] = runs
    results["summary"] = summary = summarize(runs, config)
    results["ratios"] = ratios(runs)
    results["round_ratios"] = {target: round_ratios(runs, target) for target in results["ratios"]}
    results["ratios_of_medians"] = ratios_of_medians(summary)
    results["isolation"] = isolation_cost(summary)
    results["ratio"] = ratio = results["ratios"][ENVHOST]
    results["target"] = {"description": f"EnvHost (sync game, process isolation) steps/s >= {TARGET_RATIO:.0%} "
                                        "of the echo baseline's", "measured": f"{fmt(ratio, 3)}",
                         "pass": ratio is not None and ratio >= TARGET_RATIO}
    problems = failures(runs)
    results["ok"] = not problems
    results["problems"] = problems
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps(results, indent=1) + "\n")
    print_report(results, config)
    print(f"results: {config.out}")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
