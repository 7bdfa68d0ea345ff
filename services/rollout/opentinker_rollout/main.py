"""Entry point of the Rollout service: parse settings, build, serve, stop gracefully."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from opentinker_runtime.workers.devices import discover_devices
from opentinker_runtime.core.entrypoint import run_service
from opentinker_runtime.core.heap import settle_heap
from opentinker_runtime.core.memory import keep_freed_memory
from opentinker_runtime.workers.reaping import attempt_callbacks, idle_reaper
from opentinker_runtime.core.server import ServerPlan
from opentinker_runtime.core.torch_threads import apply_torch_threads
from opentinker_runtime.workers.registration import WorkerRegistration
from opentinker_rollout.settings import RolloutSettings

if TYPE_CHECKING:
    from opentinker_rollout.envhost_sessions import SessionPools
    from opentinker_rollout.policies import PolicyRegistry

SERVICE_NAME = "rollout"


async def build_plan(settings: RolloutSettings) -> ServerPlan:
    """The RolloutService over a policy registry; EnvHost and Coordinator channels are dialled
    on first use. torch and transformers load here, after settings parse and the port is
    checked (`run_service`)."""
    from opentinker_rollout.envhost_client import EnvHostChannels
    from opentinker_rollout.episode_runs import EpisodeRunner
    from opentinker_rollout.match_client import CoordinatorChannels
    from opentinker_rollout.policies import PolicyRegistry
    from opentinker_rollout.rollout import Rollout
    from opentinker_rollout.servicer import RolloutServicer, rollout_service_binding

    keep_freed_memory()  # weight updates allocate and free a model's worth of buffers each time
    devices = discover_devices(settings.cpu_slots, shares=settings.lora_jobs_per_device)
    registry = PolicyRegistry(checkpoint_root=settings.checkpoint_dir, device_ids=tuple(d.device_id for d in devices),
                              default_max_batch_size=settings.max_batch_size,
                              continuous_batching=settings.batching == "continuous",
                              idle_ttl_s=settings.policy_idle_ttl_seconds,
                              shared_weights_dir=Path(settings.shared_weights_dir) if settings.shared_weights_dir else None)
    channels = EnvHostChannels(settings.api_key)
    coordinators = CoordinatorChannels(settings.api_key)
    episodes = EpisodeRunner(registry, channels, default_envhost_address=settings.envhost_address,
                             max_concurrent_episodes=settings.max_concurrent_episodes,
                             coordinator_channels=coordinators)
    servicer = RolloutServicer(Rollout(registry, channels, episodes))
    registration = WorkerRegistration.for_settings(settings, role="rollout", devices=devices,
                                                   resident_models=registry.resident_models,
                                                   **attempt_callbacks(JobAttempts(registry, channels.sessions)))
    return ServerPlan(services=[rollout_service_binding(servicer)],
                      start_hooks=[idle_reaper(registry.reap_idle, registry.idle_ttl_s), registration.start],
                      close_hooks=[registration.stop, registry.close, channels.close, coordinators.close])


class JobAttempts:
    """What the Scheduler says of this Rollout's jobs reaches the policies and the parked EnvHost
    sessions: a stopped job's sessions close at once instead of after their idle TTL."""

    def __init__(self, registry: PolicyRegistry, sessions: SessionPools) -> None:
        self.registry = registry
        self.sessions = sessions

    async def attempt_assigned(self, job_id: str, fencing_token: int) -> None:
        await self.registry.attempt_assigned(job_id, fencing_token)

    async def job_stopped(self, job_id: str) -> None:
        await self.registry.job_stopped(job_id)
        await self.sessions.job_stopped(job_id)


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(RolloutSettings, _process_plan, service=SERVICE_NAME)


async def _process_plan(settings: RolloutSettings) -> ServerPlan:
    """The service process's plan: its torch threads first (process-wide, so not in `build_plan`,
    which tests call inside their own process), before any model computes; then its heap settled
    (`opentinker_runtime.core.heap`), also process-wide, before the port opens and so before any policy
    loads: a model, which may be unloaded later, is never frozen."""
    apply_torch_threads(settings.torch_threads, service=SERVICE_NAME)
    plan = await build_plan(settings)
    settle_heap()
    return plan
