"""Settings of the EnvHost service, read from OPENTINKER_ENVHOST_* variables."""

from dataclasses import dataclass
from typing import ClassVar

from opentinker.core.settings import ServiceSettings, address_setting, port_setting, setting


@dataclass(frozen=True, kw_only=True)
class EnvHostSettings(ServiceSettings):
    """EnvHost runs live environment sessions built from user AbstractGame classes."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_ENVHOST_"

    port: int = port_setting(50054)
    scheduler_address: str = address_setting(
        "127.0.0.1:50051", "Scheduler this worker registers with and heartbeats to.")
    max_sessions: int = setting(
        256, "Most environment sessions this EnvHost keeps open at once.", min=1)
