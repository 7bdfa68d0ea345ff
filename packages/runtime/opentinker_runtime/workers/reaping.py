"""Background upkeep a worker's start hooks share: reaping idle state, and following the attempts
the Scheduler assigns (so an older attempt's sessions or policies are closed at once).

    ServerPlan(start_hooks=[idle_reaper(registry.reap_idle, registry.idle_ttl_s), ...])
    WorkerRegistration.for_settings(settings, role="trainer", **attempt_callbacks(registry))
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.core.server import HealthReporter, StartHook

MAX_REAP_INTERVAL_S = 30.0


def idle_reaper(reap: Callable[[], Awaitable[Any]], *ttls_s: float) -> StartHook:
    """A start hook calling `reap` every min(TTL/4 over `ttls_s`, 30 s), for the server's life."""
    interval = min(*(ttl / 4 for ttl in ttls_s), MAX_REAP_INTERVAL_S)

    async def reap_forever(_health: HealthReporter) -> None:
        while True:
            await asyncio.sleep(interval)
            await reap()

    return reap_forever


class AttemptTracker(Protocol):
    async def attempt_assigned(self, job_id: str, fencing_token: int) -> None: ...

    async def job_stopped(self, job_id: str) -> None: ...


def attempt_callbacks(tracker: AttemptTracker) -> dict[str, Callable[..., Awaitable[None]]]:
    """`on_assignment` / `on_stop` for WorkerRegistration.for_settings: tell `tracker` which attempts
    the Scheduler assigns this worker and which jobs it stopped (or moved away)."""
    async def on_assignment(assignment: job_pb2.Assignment) -> None:
        await tracker.attempt_assigned(assignment.lease.job_id, assignment.lease.fencing_token)

    async def on_stop(job_id: str) -> None:
        await tracker.job_stopped(job_id)

    return {"on_assignment": on_assignment, "on_stop": on_stop}
