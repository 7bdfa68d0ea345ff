"""Settings of the Rollout service, read from OPENTINKER_ROLLOUT_* variables."""

from dataclasses import dataclass
from typing import ClassVar

from opentinker.core.settings import ServiceSettings, address_setting, port_setting, setting


@dataclass(frozen=True, kw_only=True)
class RolloutSettings(ServiceSettings):
    """Rollout runs the inference engine and the agent-loop state machine."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_ROLLOUT_"

    port: int = port_setting(50053)
    scheduler_address: str = address_setting(
        "127.0.0.1:50051", "Scheduler this worker registers with and heartbeats to.")
    envhost_address: str = address_setting(
        "127.0.0.1:50054", "EnvHost that runs environment steps for episodes.")
    cpu_slots: int = setting(
        1, "Device slots (cpu:0..N-1) offered to jobs when torch sees no GPU.", min=1)
