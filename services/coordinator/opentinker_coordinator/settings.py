"""Settings of the Coordinator service, read from OPENTINKER_COORDINATOR_* variables."""

from dataclasses import dataclass
from typing import ClassVar

from pathlib import Path

from opentinker_runtime.core.settings import ServiceSettings, address_setting, port_setting, setting
from opentinker_runtime.auth.tenant_paths import shared_model_dir_setting, tenant_data_dir_setting
from opentinker_runtime.ml.checkpoints import checkpoint_dir_setting


@dataclass(frozen=True, kw_only=True)
class CoordinatorSettings(ServiceSettings):
    """The Coordinator drives jobs: rollout, update, weight sync, eval/checkpoint phases."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_COORDINATOR_"

    port: int = port_setting(50055)
    scheduler_address: str = address_setting(
        "127.0.0.1:50051", "Scheduler this worker registers with and reports job events to.")
    trainer_address: str = address_setting(
        "127.0.0.1:50052", "Trainer used when a job's assignment names none.")
    rollout_address: str = address_setting(
        "127.0.0.1:50053", "Rollout used when a job's assignment names none.")
    envhost_address: str = address_setting(
        "127.0.0.1:50054", "EnvHost that hosts multi-agent matches whose environment names none.")
    worker_retry_seconds: float = setting(
        30.0, "How long a call to a Trainer or Rollout is retried through UNAVAILABLE (a dropped "
        "connection, a restart) before the worker counts as lost.", positive=True)
    scheduler_retry_seconds: float = setting(
        120.0, "How long a report to the Scheduler is retried through UNAVAILABLE (a Scheduler or "
        "Redis restart) before the run gives up.", positive=True)
    requeue_wait_seconds: float = setting(
        60.0, "After losing a worker, how long a run waits for the Scheduler to re-queue the job "
        "(the new attempt resumes from the last checkpoint) before it fails the job.", positive=True)
    env_outage_seconds: float = setting(
        300.0, "How long a job waits out an unreachable EnvHost (a batch or evaluation whose episodes "
        "failed with UNAVAILABLE is collected again, with pauses of up to 5 s, each told in the job's "
        "events) before the job fails (an evaluation: is reported without a score).", positive=True)
    checkpoint_dir: Path = checkpoint_dir_setting(
        "Directory of checkpoints shared with Trainer and Rollout (read for tokenizers of SFT data).")
    tenant_data_dir: Path = tenant_data_dir_setting()
    shared_model_dir: str = shared_model_dir_setting()
