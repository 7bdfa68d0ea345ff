"""Settings of the Scheduler service, read from OPENTINKER_SCHEDULER_* and OPENTINKER_REDIS_URL."""

from dataclasses import dataclass
from typing import ClassVar

from opentinker.core.settings import ServiceSettings, port_setting, redis_url_setting, setting


@dataclass(frozen=True, kw_only=True)
class SchedulerSettings(ServiceSettings):
    """The Scheduler owns jobs, tenants, API keys, workers and device leases, all in Redis."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_SCHEDULER_"

    port: int = port_setting(50051)
    redis_url: str = redis_url_setting(
        "Redis holding all scheduler state (shared by every service), e.g. "
        "redis://:password@host:6379/0.")
    redis_check_seconds: float = setting(
        5.0, "Seconds between Redis health pings; while Redis does not answer, the scheduler "
        "reports NOT_SERVING and retries with backoff.", positive=True)
