"""Entry point of the Trainer service: parse settings, build, serve, stop gracefully."""

from opentinker.core.entrypoint import run_service
from opentinker.core.server import ServerPlan
from opentinker_trainer.servicer import trainer_service_binding
from opentinker_trainer.settings import TrainerSettings

SERVICE_NAME = "trainer"


async def build_plan(settings: TrainerSettings) -> ServerPlan:
    """What the server hosts; peers are not dialled yet (no RPC needs them)."""
    return ServerPlan(services=[trainer_service_binding()])


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(TrainerSettings, build_plan, service=SERVICE_NAME)
