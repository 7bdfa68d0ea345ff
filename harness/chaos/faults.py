"""Fault injection during a running RL job, and what the run must prove afterwards.

`run_with_faults` submits a job to a `ChaosStack`, records its events from a watcher thread,
and injects the planned faults one by one: each waits until the job trained two steps beyond the
previous fault's recovery (so every fault hits a running job), then a random fraction of a step
(measured from the job's own metrics, so the pace holds on a fast or a slow machine), so kills
land in different phases (rollout, update, weight sync, checkpoint). A kill is SIGKILL followed by a
restart of the same command after a short random delay, like a supervisor; a Redis fault is a
SIGKILL of redis-server and a restart that reloads the append-only file; a drop resets every
open connection through the proxies in front of the named services.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from opentinker.client.retry import RetryPolicy
from harness.chaos.stack import SERVICE_NAMES, ChaosStack

S = job_pb2.Job
TERMINAL = {S.STATE_SUCCEEDED, S.STATE_FAILED, S.STATE_CANCELLED}
PATIENT = RetryPolicy(attempts=10_000, initial_delay=0.1, max_delay=1.0)
"""Clients of the test ride out Scheduler and Redis restarts like the services do."""


@dataclass(frozen=True)
class Fault:
    kind: str
    """"kill" (a service), "redis" (kill + restart from the AOF) or "drop" (connections)."""
    target: str
    """The service killed, or the services whose connections are dropped ("all")."""


@dataclass
class Injected:
    fault: Fault
    time: float
    """Wall-clock time (s since the epoch) of the injection."""
    step: int
    """The last trained step the job had reported before the fault."""
    recovered_step: int = 0
    """The last trained step when the service was back (a drop: at once)."""
    downtime: float = 0.0
    cut: int = 0
    """Connections cut (drops)."""


@dataclass
class EventRecorder:
    """Every event of one job, in order, from a watcher that reconnects through outages."""

    client: SchedulerClient
    job_id: str
    events: list[job_pb2.JobEvent] = field(default_factory=list)
    error: BaseException | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._watch, name=f"watch-{self.job_id}", daemon=True)
        thread.start()
        return thread

    def _watch(self) -> None:
        try:
            for event in self.client.watch_job(self.job_id):
                with self.changed:
                    self.events.append(event)
                    self.changed.notify_all()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error
        with self.changed:
            self.changed.notify_all()

    def trained_step(self) -> int:
        """The highest step with training metrics so far."""
        return max((e.metrics.step for e in self.events if is_training_metrics(e)), default=0)

    def step_seconds(self) -> float:
        """How long a training step takes lately (from the last metrics events' times)."""
        times = [e.time.seconds + e.time.nanos / 1e9 for e in self.events if is_training_metrics(e)][-4:]
        gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
        return sorted(gaps)[len(gaps) // 2] if gaps else 0.5

    def state(self) -> int:
        states = [e.state_changed.to_state for e in self.events if e.WhichOneof("payload") == "state_changed"]
        return states[-1] if states else S.STATE_UNSPECIFIED

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not condition():
                if self.error is not None:
                    raise AssertionError(f"the watcher failed: {self.error!r}")
                if self.state() in TERMINAL:
                    raise AssertionError(f"the job ended ({S.State.Name(self.state())}) while waiting for {what}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
                self.changed.wait(min(left, 1.0))


def is_training_metrics(event: job_pb2.JobEvent) -> bool:
    return event.WhichOneof("payload") == "metrics" and "time/rollout_s" in event.metrics.values


@dataclass
class ChaosRun:
    job_id: str
    final: job_pb2.Job
    events: list[job_pb2.JobEvent]
    injected: list[Injected]
    seconds: float


def plan_faults(rng: random.Random, *, kills_per_service: int, redis_restarts: int, drops: int) -> list[Fault]:
    """Every service killed `kills_per_service` times, plus Redis restarts and connection
    drops, in a random order."""
    faults = [Fault("kill", name) for name in SERVICE_NAMES for _ in range(kills_per_service)]
    faults += [Fault("redis", "redis")] * redis_restarts
    faults += [Fault("drop", "all")] * drops
    rng.shuffle(faults)
    return faults


KEEPS_TRAINING = {("kill", "envhost"), ("kill", "scheduler"), ("redis", "redis")}
"""Faults the job trains through: its reports are retried, so the steps it trains meanwhile show
only once they get through (17 steps of a tiny job after a Scheduler kill, seen in CI)."""


def steps_for(faults: list[Fault]) -> int:
    """Enough steps for every fault to hit a running job: a fault waits for two steps beyond the
    previous fault's recovery and lands within the step after (5 steps each); one the job trains
    through (`KEEPS_TRAINING`) may be followed by a burst of steps reported late (15 more)."""
    return 5 * len(faults) + 15 * sum((f.kind, f.target) in KEEPS_TRAINING for f in faults) + 6


def run_with_faults(stack: ChaosStack, spec: dict, faults: list[Fault], rng: random.Random, *,
                    step_timeout: float = 240.0, job_timeout: float = 600.0,
                    report: Callable[[str], None] = print) -> ChaosRun:
    started = time.monotonic()
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30, retry=PATIENT) as client:
        job_id = client.submit_job(spec).job_id
        recorder = EventRecorder(client, job_id)
        watcher = recorder.start()
        injected: list[Injected] = []
        for number, fault in enumerate(faults, 1):
            # two steps beyond the last recovery: one that ran whole after it, so the previous
            # fault's evidence (e.g. failed episodes of the step it hit) lands before this one
            beyond = injected[-1].recovered_step + 1 if injected else 0
            recorder.wait_for(lambda beyond=beyond: recorder.trained_step() > beyond and recorder.state() == S.STATE_RUNNING,
                              step_timeout, f"a step beyond {beyond} before fault {number} ({fault})")
            time.sleep(rng.uniform(0.0, 1.0) * recorder.step_seconds())  # somewhere in the next step
            done = inject(stack, fault, rng, step=recorder.trained_step())
            done.recovered_step = recorder.trained_step()
            injected.append(done)
            report(f"fault {number}/{len(faults)}: {fault.kind} {fault.target} at step {done.step} "
                   f"(down {done.downtime:.1f}s{f', {done.cut} connections cut' if fault.kind == 'drop' else ''})")
        watcher.join(timeout=job_timeout)
        if watcher.is_alive():
            raise AssertionError(f"job {job_id} did not end within {job_timeout:g}s after the last fault")
        if recorder.error is not None:
            raise AssertionError(f"the watcher failed: {recorder.error!r}")
        final = client.get_job(job_id)
    return ChaosRun(job_id=job_id, final=final, events=recorder.events, injected=injected,
                    seconds=time.monotonic() - started)


def inject(stack: ChaosStack, fault: Fault, rng: random.Random, *, step: int) -> Injected:
    at, began = time.time(), time.monotonic()
    if fault.kind == "drop":
        targets = SERVICE_NAMES if fault.target == "all" else (fault.target,)
        cut = sum(stack.drop_connections(name) for name in targets)
        return Injected(fault, at, step, cut=cut)
    stack.kill(fault.target)
    # a supervisor's restart delay; Redis stays away a little longer, as a real restart would
    time.sleep(rng.uniform(1.0, 2.0) if fault.kind == "redis" else rng.uniform(0.2, 1.0))
    stack.restart(fault.target)
    return Injected(fault, at, step, downtime=time.monotonic() - began)
