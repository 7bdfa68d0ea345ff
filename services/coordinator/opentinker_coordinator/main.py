"""Entry point of the Coordinator service: parse settings, build, serve, stop gracefully.

The coordinator registers with the Scheduler as a COORDINATOR worker; every assignment it
receives through its heartbeat starts a run (the job's driver) in the background, and a
stop (cancel, lease lost) stops that run at its next phase boundary.
"""

from __future__ import annotations

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.core.entrypoint import run_service
from opentinker_runtime.core.memory import keep_freed_memory
from opentinker_runtime.core.server import ServerPlan
from opentinker_runtime.auth.tenant_paths import TenantAreas, shared_model_dir
from opentinker_runtime.workers.registration import WorkerRegistration
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.driver.env_outages import OutageBudget
from opentinker_coordinator.protocol.envhost_seats import EnvHostChannels
from opentinker_coordinator.launch import JobLauncher, LaunchConfig
from opentinker_coordinator.adapters.retries import RetryBudget
from opentinker_coordinator.runs import RunRegistry
from opentinker_coordinator.servicer import coordinator_service_binding
from opentinker_coordinator.settings import CoordinatorSettings

SERVICE_NAME = "coordinator"


def registration(settings: CoordinatorSettings, registry: RunRegistry) -> WorkerRegistration:
    async def on_assignment(assignment: job_pb2.Assignment) -> None:
        registry.start(assignment.lease.job_id, assignment.lease.fencing_token)

    async def on_stop(job_id: str) -> None:
        registry.stop(job_id)

    return WorkerRegistration.for_settings(settings, role="coordinator", on_assignment=on_assignment,
                                           on_stop=on_stop)


async def build_plan(settings: CoordinatorSettings) -> ServerPlan:
    keep_freed_memory()  # every weight sync relays a model's worth of chunk messages
    envhosts = EnvHostChannels(settings.envhost_address, settings.api_key)
    protocol = AgentProtocol(envhosts.factory())
    launcher = JobLauncher(LaunchConfig(
        tenant_areas=TenantAreas(root=settings.tenant_data_dir, shared_model_dir=shared_model_dir(settings.shared_model_dir)),
        scheduler_address=settings.scheduler_address, trainer_address=settings.trainer_address,
        rollout_address=settings.rollout_address,
        checkpoint_dir=settings.checkpoint_dir, api_key=settings.api_key,
        coordinator_address=settings.reachable_address,
        worker_retry=RetryBudget(seconds=settings.worker_retry_seconds),
        scheduler_retry=RetryBudget(seconds=settings.scheduler_retry_seconds),
        requeue_wait_seconds=settings.requeue_wait_seconds,
        env_outage=OutageBudget(seconds=settings.env_outage_seconds)), protocol, job_tokens=envhosts.job_tokens)
    registry = RunRegistry(launcher)
    worker = registration(settings, registry)
    return ServerPlan(services=[coordinator_service_binding(registry, protocol)], start_hooks=[worker.start],
                      close_hooks=[worker.stop, registry.close, protocol.close, envhosts.close])


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(CoordinatorSettings, build_plan, service=SERVICE_NAME)
