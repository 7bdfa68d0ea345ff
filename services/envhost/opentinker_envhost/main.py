"""Entry point of the EnvHost service: parse settings, build, serve, stop gracefully."""

from opentinker.core.entrypoint import run_service
from opentinker.core.server import ServerPlan
from opentinker_envhost.servicer import envhost_service_binding
from opentinker_envhost.settings import EnvHostSettings

SERVICE_NAME = "envhost"


async def build_plan(settings: EnvHostSettings) -> ServerPlan:
    """What the server hosts; peers are not dialled yet (no RPC needs them)."""
    return ServerPlan(services=[envhost_service_binding()])


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(EnvHostSettings, build_plan, service=SERVICE_NAME)
