"""Entry point of the Trainer service: parse settings, build, serve, stop gracefully."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from opentinker.api.scheduler.v1 import job_pb2
from opentinker.core.devices import Device, discover_devices
from opentinker.core.entrypoint import run_service
from opentinker.core.memory import keep_freed_memory
from opentinker.core.server import HealthReporter, ServerPlan, StartHook
from opentinker.core.worker_registration import WorkerRegistration
from opentinker_trainer.settings import TrainerSettings

if TYPE_CHECKING:
    from opentinker_trainer.sessions import SessionRegistry

SERVICE_NAME = "trainer"
MAX_REAP_INTERVAL_S = 30.0


def idle_reaper(registry: SessionRegistry) -> StartHook:
    """A start hook closing idle sessions every min(TTL/4, 30 s)."""
    interval = min(registry.idle_ttl_s / 4, MAX_REAP_INTERVAL_S)

    async def reap_forever(_health: HealthReporter) -> None:
        while True:
            await asyncio.sleep(interval)
            await registry.reap_idle()

    return reap_forever


def scheduler_registration(settings: TrainerSettings, registry: SessionRegistry,
                           devices: Sequence[Device]) -> WorkerRegistration:
    """The worker registration, telling `registry` which attempts the Scheduler assigns this
    Trainer and which jobs it stopped (or moved away), so their stale sessions close."""
    async def on_assignment(assignment: job_pb2.Assignment) -> None:
        await registry.attempt_assigned(assignment.lease.job_id, assignment.lease.fencing_token)

    async def on_stop(job_id: str) -> None:
        await registry.job_stopped(job_id)

    return WorkerRegistration.for_settings(settings, role="trainer", devices=devices,
                                           on_assignment=on_assignment, on_stop=on_stop)


async def build_plan(settings: TrainerSettings) -> ServerPlan:
    """What the server hosts: the TrainerService over an empty session registry."""
    from opentinker.ml.models import quiet_transformers  # torch loads here, after settings parse
    from opentinker_trainer.servicer import build_registry, trainer_service_binding

    quiet_transformers()
    keep_freed_memory()  # exports allocate and free a model's worth of buffers each time
    devices = discover_devices(settings.cpu_slots)
    registry = build_registry(settings.checkpoint_dir, settings.device,
                              [device.device_id for device in devices],
                              idle_ttl_s=settings.session_idle_ttl_seconds)
    registration = scheduler_registration(settings, registry, devices)
    return ServerPlan(services=[trainer_service_binding(registry)],
                      start_hooks=[idle_reaper(registry), registration.start],
                      close_hooks=[registration.stop, registry.close_all])


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(TrainerSettings, build_plan, service=SERVICE_NAME)
