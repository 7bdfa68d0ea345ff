"""Settings of the Trainer service, read from OPENTINKER_TRAINER_* variables."""

from dataclasses import dataclass
from typing import ClassVar

from opentinker.core.settings import ServiceSettings, address_setting, port_setting, setting


@dataclass(frozen=True, kw_only=True)
class TrainerSettings(ServiceSettings):
    """The Trainer holds per-job policy weights, optimizer state and checkpoints."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TRAINER_"

    port: int = port_setting(50052)
    scheduler_address: str = address_setting(
        "127.0.0.1:50051", "Scheduler this worker registers with and heartbeats to.")
    cpu_slots: int = setting(
        1, "Device slots (cpu:0..N-1) offered to jobs when torch sees no GPU.", min=1)
