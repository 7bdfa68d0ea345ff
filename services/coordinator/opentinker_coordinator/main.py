"""Entry point of the Coordinator service: parse settings, build, serve, stop gracefully."""

from opentinker.core.entrypoint import run_service
from opentinker.core.server import ServerPlan
from opentinker_coordinator.servicer import coordinator_service_binding
from opentinker_coordinator.settings import CoordinatorSettings

SERVICE_NAME = "coordinator"


async def build_plan(settings: CoordinatorSettings) -> ServerPlan:
    """What the server hosts; peers are not dialled yet (no RPC needs them)."""
    return ServerPlan(services=[coordinator_service_binding()])


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(CoordinatorSettings, build_plan, service=SERVICE_NAME)
