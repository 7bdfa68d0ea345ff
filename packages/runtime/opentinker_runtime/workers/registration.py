"""Register a service process with the Scheduler as a worker, as start/close hooks.

    hooks = WorkerRegistration.for_settings(settings, role="trainer", devices=discover_devices(1))
    ServerPlan(..., start_hooks=[hooks.start], close_hooks=[hooks.stop])

The worker id is `<role>@<advertised address>`, stable across restarts of the same process
slot, so a restarted worker replaces its old registration.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.workers.devices import Device
from opentinker_runtime.core.server import HealthReporter
from opentinker_runtime.workers.agent import ResidentModels, WorkerAgent

log = structlog.get_logger(__name__)

AssignmentHandler = Callable[[job_pb2.Assignment], Awaitable[None]]
StopHandler = Callable[[str], Awaitable[None]]


async def _log_assignment(assignment: job_pb2.Assignment) -> None:
    log.info("assigned", job_id=assignment.lease.job_id, devices=list(assignment.device_ids),
             fencing_token=assignment.lease.fencing_token)


async def _log_stop(job_id: str) -> None:
    log.info("job_stopped", job_id=job_id)


class WorkerRegistration:
    def __init__(self, agent: WorkerAgent) -> None:
        self.agent = agent

    @classmethod
    def for_settings(cls, settings, *, role: str, devices: Sequence[Device] = (),
                     on_assignment: AssignmentHandler = _log_assignment,
                     on_stop: StopHandler = _log_stop, name: str = "",
                     resident_models: ResidentModels | None = None) -> "WorkerRegistration":
        """`name`: what jobs call it (EnvHosts); the worker id is then `<role>-<name>@<address>`."""
        address = settings.reachable_address
        worker_id = f"{role}-{name}@{address}" if name else f"{role}@{address}"
        agent = WorkerAgent(scheduler_address=settings.scheduler_address, role=role,
                            worker_id=worker_id, address=address, devices=devices,
                            on_assignment=on_assignment, on_stop=on_stop, api_key=settings.api_key, name=name,
                            resident_models=resident_models)
        return cls(agent)

    async def start(self, health: HealthReporter) -> None:
        await self.agent.start()

    async def stop(self) -> None:
        await self.agent.stop()
