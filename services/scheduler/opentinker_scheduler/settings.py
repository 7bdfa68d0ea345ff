"""Settings of the Scheduler service, read from OPENTINKER_SCHEDULER_* and OPENTINKER_REDIS_URL."""

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from opentinker_runtime.core.errors import SettingsError
from opentinker_runtime.core.settings import ServiceSettings, port_setting, redis_url_setting, setting
from opentinker_runtime.auth.tenant_paths import shared_model_dir, shared_model_dir_setting, tenant_data_dir_setting
from opentinker_runtime.ml.checkpoints import checkpoint_dir_setting
from opentinker_scheduler.config import SchedulerConfig


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
    heartbeat_interval_seconds: float = setting(
        2.0, "How often workers are told to heartbeat; also bounds how fast a cancelled job's "
        "workers learn to stop.", positive=True)
    worker_ttl_seconds: float = setting(
        10.0, "A worker with no heartbeat for this long is DEAD and its device leases expire "
        "(their jobs fail). Must exceed the heartbeat interval.", positive=True)
    allocator_interval_seconds: float = setting(
        0.5, "Seconds between allocator passes (expire leases, start queued jobs).", positive=True)
    start_at_submit: bool = setting(
        True, "Start a job that fits the free devices the allocator last saw in the same Redis round "
        "trip that queues it (submit -> RUNNING without waiting for an allocator pass); false: every "
        "job waits for the next pass.")
    coordinator_capacity: int = setting(
        8, "Jobs one Coordinator serves at once.", min=1, max=1024)
    gateway_capacity: int = setting(
        256, "SESSION jobs one Tinker gateway drives at once (each training client, and each client "
        "session's sampler host, is one; the devices they lease are counted by the tenants' quotas).",
        min=1, max=65536)
    dead_worker_retention_seconds: float = setting(
        300.0, "How long ListWorkers still shows a DEAD worker before it is forgotten.", min=0)
    queue_aging_seconds: float = setting(
        60.0, "Queue aging: a job that has waited this much longer than another counts one priority "
        "point higher, so low-priority jobs are never starved by a stream of higher ones.", positive=True)
    starvation_seconds: float = setting(
        300.0, "A queued job that has waited this long without fitting stops backfilling: smaller "
        "jobs behind it wait until it starts.", positive=True)
    max_events_per_job: int = setting(
        100_000, "Events kept per job (metrics, progress, logs, state changes); older ones are "
        "trimmed, and WatchJob from a trimmed position answers OUT_OF_RANGE.", min=100, max=10_000_000)
    request_id_ttl_seconds: int = setting(
        86400, "How long a request_id is remembered for idempotent retries.", min=60)
    max_watch_streams_per_tenant: int = setting(
        64, "Live WatchJob streams (watch, run, fit, the dashboard's live view) one tenant may hold on "
        "this scheduler; more are refused RESOURCE_EXHAUSTED (reason STREAM_LIMIT). Every stream "
        "shares one Redis reader, so this bounds memory and fairness, not connections.", min=1, max=100_000)
    max_admin_watch_streams: int = setting(
        1024, "Live WatchJob streams all admin keys together may hold on this scheduler (OpenTinker's "
        "services, and the dashboard for browsers without a key of their own).", min=1, max=100_000)
    redis_max_connections: int = setting(
        100, "Connections the scheduler opens to Redis at most for its calls (WatchJob streams share "
        "one more, for blocking reads).", min=4, max=10_000)
    redis_pool_wait_seconds: float = setting(
        2.0, "How long a call waits for a free Redis connection when all are in use; then it fails "
        "UNAVAILABLE saying the scheduler is busy (retryable), never that Redis is down.", positive=True)
    shared_model_dir: str = shared_model_dir_setting()
    checkpoint_dir: Path = checkpoint_dir_setting(
        "Directory of checkpoints the Trainer writes, shared with it read-only: the Scheduler lists a "
        "job's checkpoints there and streams them to their tenant (ListArtifacts, DownloadArtifact).")
    tenant_data_dir: Path = tenant_data_dir_setting()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.worker_ttl_seconds <= self.heartbeat_interval_seconds:
            raise SettingsError(
                f"invalid {type(self).__name__}: OPENTINKER_SCHEDULER_WORKER_TTL_SECONDS="
                f"{self.worker_ttl_seconds} must exceed OPENTINKER_SCHEDULER_HEARTBEAT_INTERVAL_SECONDS="
                f"{self.heartbeat_interval_seconds} (3x or more is advisable)")

    def domain_config(self) -> SchedulerConfig:
        """The domain's tunables in milliseconds."""
        return SchedulerConfig(
            heartbeat_interval_ms=_ms(self.heartbeat_interval_seconds),
            worker_ttl_ms=_ms(self.worker_ttl_seconds),
            dead_worker_retention_ms=_ms(self.dead_worker_retention_seconds),
            coordinator_capacity=self.coordinator_capacity, gateway_capacity=self.gateway_capacity,
            request_id_ttl_s=self.request_id_ttl_seconds,
            allocator_interval_ms=_ms(self.allocator_interval_seconds), start_at_submit=self.start_at_submit,
            queue_aging_ms=_ms(self.queue_aging_seconds), starvation_ms=_ms(self.starvation_seconds),
            max_events_per_job=self.max_events_per_job,
            max_watch_streams_per_tenant=self.max_watch_streams_per_tenant,
            max_admin_watch_streams=self.max_admin_watch_streams,
            shared_model_dir=shared_model_dir(self.shared_model_dir),
            checkpoint_root=Path(self.checkpoint_dir).resolve(), tenant_data_dir=Path(self.tenant_data_dir).resolve())


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
