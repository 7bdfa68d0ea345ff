"""Settings of the Rollout service, read from OPENTINKER_ROLLOUT_* and OPENTINKER_CHECKPOINT_DIR."""

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from opentinker_runtime.core.settings import ServiceSettings, address_setting, port_setting, setting
from opentinker_runtime.core.torch_threads import torch_threads_setting
from opentinker_runtime.ml.checkpoints import checkpoint_dir_setting
from opentinker_runtime.ml.shared_weights_setting import shared_weights_dir_setting


@dataclass(frozen=True, kw_only=True)
class RolloutSettings(ServiceSettings):
    """Rollout runs the inference engine and the agent-loop state machine."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_ROLLOUT_"

    port: int = port_setting(50053)
    scheduler_address: str = address_setting(
        "127.0.0.1:50051", "Scheduler this worker registers with and heartbeats to.")
    envhost_address: str = address_setting(
        "127.0.0.1:50054", "EnvHost that runs environment steps for episodes whose "
        "environment reference names no envhost_address.")
    cpu_slots: int = setting(
        1, "Device slots (cpu:0..N-1) offered to jobs when torch sees no GPU.", min=1)
    lora_jobs_per_device: int = setting(
        8, "How many LoRA jobs (of one device each) the Scheduler may place on each device of this "
        "Rollout at once, each leasing a share of it: their adapters decode over one base in one "
        "batch (a job that asks for resources[].dedicated_device gets a whole one). 1 = one job "
        "per device.", min=1)
    checkpoint_dir: Path = checkpoint_dir_setting(
        "Directory of checkpoints written by the Trainer; LoadModel reads checkpoint models here.")
    max_batch_size: int = setting(
        128, "Most sequences one batched generation step decodes together (per policy), unless "
        "LoadModel asks for another size.", min=1, max=4096)
    batching: str = setting(
        "continuous", "How a policy's generation requests share the engine: continuous (requests "
        "join and leave the running batch at every decoding step) or static (each batch decodes "
        "to its longest row before the next starts; kept for comparison).",
        choices=("continuous", "static"))
    policy_idle_ttl_seconds: float = setting(
        1800.0, "A loaded policy not used (no call, no generation) for this long is unloaded, unless it "
        "belongs to a job attempt the Scheduler has assigned this Rollout (those end with their lease: "
        "policies of an attempt that a newer one replaced, or of a job the Scheduler stopped or moved "
        "away, are unloaded at once).", positive=True)
    max_concurrent_episodes: int = setting(
        256, "Most episodes of one RunEpisodes call that run at the same time (match episodes all run at "
        "once: a bounded agent could wait on a seat the other agent has not reached).", min=1)
    torch_threads: int = torch_threads_setting()
    shared_weights_dir: str = shared_weights_dir_setting(
        "Directory in shared memory from which UpdateWeights reads a header's shared file (written "
        "by a Trainer on this host); the same directory as the Trainer's. Only plain files below it "
        "are read, each once, then deleted.")
