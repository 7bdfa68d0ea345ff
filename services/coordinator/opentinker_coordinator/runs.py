"""Runs: the jobs this coordinator drives, their state, and their background tasks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

import structlog

from opentinker_runtime.edge.errors import Code, DomainError, InvalidArgument
from opentinker_coordinator.metrics import ACTIVE_RUNS, RUNS_ENDED

log = structlog.get_logger(__name__)


class RunNotFound(DomainError):
    """No run for that job on this Coordinator."""

    code = Code.NOT_FOUND


class RunStatus(StrEnum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    """A multi-agent run whose agent's worker was lost, waiting to be re-queued or to time out."""
    STOPPING = "STOPPING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"


@dataclass(kw_only=True)
class RunState:
    """What GetRun/WatchRun show; updated by the reporter as the driver goes."""

    job_id: str
    fencing_token: int
    status: RunStatus = RunStatus.STARTING
    phase: str = "SETUP"
    step: int = 0
    total_steps: int = 0
    latest_metrics: dict[str, float] = field(default_factory=dict)
    last_checkpoint_id: str = ""
    message: str = ""
    start_time: float = field(default_factory=time.time)
    version: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def touch(self) -> None:
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()

    def record_progress(self, *, phase: str, step: int, total_steps: int) -> None:
        self.status = RunStatus.RUNNING if self.status is RunStatus.STARTING else self.status
        self.phase, self.step, self.total_steps = phase, step, total_steps
        self.touch()

    def record_metrics(self, values: dict[str, float]) -> None:
        self.latest_metrics.update(values)
        self.touch()

    def pause(self, message: str) -> None:
        self.status, self.message = RunStatus.PAUSED, message
        self.touch()

    def end(self, status: RunStatus, message: str) -> None:
        self.status, self.message = status, message
        self.touch()

    @property
    def ended(self) -> bool:
        return self.status in (RunStatus.FINISHED, RunStatus.FAILED)

    async def updates(self) -> AsyncIterator[RunState]:
        """This run now, then after each change, until it has ended (WatchRun)."""
        while True:
            changed = self.changed
            yield self
            if self.ended:
                return
            await changed.wait()


Launcher = Callable[[RunState], Awaitable[None]]


class RunRegistry:
    """Starts one driver task per job (idempotent per fencing token) and stops them."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.runs: dict[str, RunState] = {}
        self.tasks: dict[str, asyncio.Task] = {}

    def start(self, job_id: str, fencing_token: int) -> RunState:
        if not job_id:
            raise InvalidArgument("lease.job_id is required")
        current = self.runs.get(job_id)
        if current and current.fencing_token >= fencing_token and not current.ended:
            return current
        if current and not current.ended:
            current.stop.set()  # an older attempt: superseded by the new lease
        run = RunState(job_id=job_id, fencing_token=fencing_token)
        self.runs[job_id] = run
        self.tasks[job_id] = asyncio.create_task(self._drive(run), name=f"run-{job_id}")
        return run

    async def _drive(self, run: RunState) -> None:
        ACTIVE_RUNS.inc()
        try:
            await self.launcher(run)
        except Exception as error:  # noqa: BLE001 - the run's edge: record and log, never crash the service
            log.exception("run_crashed", job_id=run.job_id)
            run.end(RunStatus.FAILED, f"{type(error).__name__}: {error}")
        finally:
            ACTIVE_RUNS.dec()
            RUNS_ENDED.labels(status=run.status.value).inc()

    def stop(self, job_id: str) -> RunState | None:
        run = self.runs.get(job_id)
        if run and not run.ended:
            run.stop.set()
            run.status = RunStatus.STOPPING
            run.touch()
        return run

    def get(self, job_id: str) -> RunState | None:
        return self.runs.get(job_id)

    def existing(self, job_id: str) -> RunState:
        run = self.runs.get(job_id)
        if run is None:
            raise RunNotFound(f"no run for job {job_id!r} on this coordinator")
        return run

    def stop_existing(self, job_id: str) -> RunState:
        """`stop` a run this Coordinator has (StopRun); RunNotFound otherwise."""
        run = self.stop(job_id)
        if run is None:
            raise RunNotFound(f"no run for job {job_id!r} here")
        return run

    async def close(self) -> None:
        for run in self.runs.values():
            run.stop.set()
        tasks = [t for t in self.tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
