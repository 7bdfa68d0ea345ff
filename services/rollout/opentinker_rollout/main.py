"""Entry point of the Rollout service: parse settings, build, serve, stop gracefully."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from opentinker.api.scheduler.v1 import job_pb2
from opentinker.core.devices import Device, discover_devices
from opentinker.core.entrypoint import run_service
from opentinker.core.memory import keep_freed_memory
from opentinker.core.server import HealthReporter, ServerPlan, StartHook
from opentinker.core.worker_registration import WorkerRegistration
from opentinker_rollout.envhost_client import EnvHostChannels
from opentinker_rollout.match_client import CoordinatorChannels
from opentinker_rollout.policies import PolicyRegistry
from opentinker_rollout.servicer import RolloutServicer, rollout_service_binding
from opentinker_rollout.settings import RolloutSettings

SERVICE_NAME = "rollout"
MAX_REAP_INTERVAL_S = 30.0


def idle_reaper(registry: PolicyRegistry) -> StartHook:
    """A start hook unloading idle policies every min(TTL/4, 30 s)."""
    interval = min(registry.idle_ttl_s / 4, MAX_REAP_INTERVAL_S)

    async def reap_forever(_health: HealthReporter) -> None:
        while True:
            await asyncio.sleep(interval)
            await registry.reap_idle()

    return reap_forever


def scheduler_registration(settings: RolloutSettings, registry: PolicyRegistry,
                           devices: Sequence[Device]) -> WorkerRegistration:
    """The worker registration, telling `registry` which attempts the Scheduler assigns this
    Rollout and which jobs it stopped (or moved away), so their stale policies are unloaded."""
    async def on_assignment(assignment: job_pb2.Assignment) -> None:
        await registry.attempt_assigned(assignment.lease.job_id, assignment.lease.fencing_token)

    async def on_stop(job_id: str) -> None:
        await registry.job_stopped(job_id)

    return WorkerRegistration.for_settings(settings, role="rollout", devices=devices,
                                           on_assignment=on_assignment, on_stop=on_stop)


async def build_plan(settings: RolloutSettings) -> ServerPlan:
    """The RolloutService over a policy registry; EnvHost and Coordinator channels are dialled
    on first use."""
    keep_freed_memory()  # weight updates allocate and free a model's worth of buffers each time
    registry = PolicyRegistry(checkpoint_root=settings.checkpoint_dir,
                              default_max_batch_size=settings.max_batch_size,
                              continuous_batching=settings.batching == "continuous",
                              idle_ttl_s=settings.policy_idle_ttl_seconds)
    channels = EnvHostChannels(settings.api_key)
    coordinators = CoordinatorChannels(settings.api_key)
    servicer = RolloutServicer(registry, channels, default_envhost_address=settings.envhost_address,
                               max_concurrent_episodes=settings.max_concurrent_episodes,
                               coordinator_channels=coordinators)
    registration = scheduler_registration(settings, registry, discover_devices(settings.cpu_slots))
    return ServerPlan(services=[rollout_service_binding(servicer)],
                      start_hooks=[idle_reaper(registry), registration.start],
                      close_hooks=[registration.stop, registry.close, channels.close, coordinators.close])


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(RolloutSettings, build_plan, service=SERVICE_NAME)
