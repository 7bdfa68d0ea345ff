"""Entry point of the Rollout service: parse settings, build, serve, stop gracefully."""

from opentinker.core.entrypoint import run_service
from opentinker.core.server import ServerPlan
from opentinker_rollout.servicer import rollout_service_binding
from opentinker_rollout.settings import RolloutSettings

SERVICE_NAME = "rollout"


async def build_plan(settings: RolloutSettings) -> ServerPlan:
    """What the server hosts; peers are not dialled yet (no RPC needs them)."""
    return ServerPlan(services=[rollout_service_binding()])


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(RolloutSettings, build_plan, service=SERVICE_NAME)
