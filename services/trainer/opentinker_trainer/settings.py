"""Settings of the Trainer service, read from OPENTINKER_TRAINER_* variables (and the shared
OPENTINKER_CHECKPOINT_DIR)."""

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from opentinker_runtime.core.settings import ServiceSettings, address_setting, port_setting, setting
from opentinker_runtime.core.torch_threads import torch_threads_setting
from opentinker_runtime.ml.checkpoints import checkpoint_dir_setting
from opentinker_runtime.ml.shared_weights_setting import shared_weights_dir_setting


@dataclass(frozen=True, kw_only=True)
class TrainerSettings(ServiceSettings):
    """The Trainer holds per-job policy weights, optimizer state and checkpoints."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TRAINER_"

    port: int = port_setting(50052)
    scheduler_address: str = address_setting(
        "127.0.0.1:50051", "Scheduler this worker registers with and heartbeats to.")
    cpu_slots: int = setting(
        1, "Device slots (cpu:0..N-1) offered to jobs when torch sees no GPU.", min=1)
    device: str = setting(
        "auto", "Torch device sessions run on: auto (the first CUDA device when torch sees one, "
        "else cpu), cpu or cuda.", choices=("auto", "cpu", "cuda"))
    checkpoint_dir: Path = checkpoint_dir_setting(
        "Directory the Trainer writes checkpoints to and loads them from; shared with Rollout.")
    session_idle_ttl_seconds: float = setting(
        1800.0, "A session without calls for this long is closed and its model and optimizer "
        "state freed, unless it belongs to a job attempt the Scheduler has assigned this Trainer "
        "(those end with their lease: sessions of an attempt that a newer one replaced, or of a job "
        "the Scheduler stopped or moved away, are closed at once).", positive=True)
    torch_threads: int = torch_threads_setting()
    share_prefixes: bool = setting(
        True, "Run the prompt prefix that a batch's datums share (a GRPO group's G completions "
        "of one prompt) through the model once per ForwardBackward, with gradients through its "
        "KV cache, instead of once per datum. Same logprobs and gradients up to float rounding; "
        "a model whose cached forward disagrees with its plain one on its first batch keeps the "
        "plain forward.")
    share_lora_base: bool = setting(
        True, "LoRA sessions of the same base model (same source, precision and device) stand on "
        "one frozen copy of it: each keeps its own adapter, optimizer state, RNG and checkpoints, "
        "and computes exactly what it would on a copy of its own. False: every session loads "
        "its own copy (a data-parallel session always does).")
    lora_jobs_per_device: int = setting(
        8, "With share_lora_base: how many LoRA jobs (of one device each) the Scheduler may place on "
        "each device of this Trainer at once, each leasing a share of it (a job that asks for "
        "resources[].dedicated_device gets a whole one). 1 = one job per device.", min=1)
    collective_timeout_seconds: float = setting(
        600.0, "How long a data-parallel rank waits in a collective (summing gradients, the start's "
        "broadcast) or for its group to form before the call fails. Across hosts it is also how long "
        "a rank host cut off mid-step can hold this Trainer in that step; shorten it on a fast, "
        "stable network, lengthen it for large models on a slow one.", positive=True)
    cycle_gather_ms: float = setting(
        50.0, "With share_lora_base: how long a ForwardBackward of a session on a shared base waits "
        "for the base's other sessions' calls, to run them all as one batched forward/backward (a "
        "cycle). It starts at once when every session of the base has a call queued; 0 = never wait "
        "(calls that queue while a cycle runs still share the next).", min=0)
    shared_weights_dir: str = shared_weights_dir_setting(
        "Directory in shared memory where ExportWeights writes the files a Rollout on this host "
        "reads (transport SHARED_MEMORY); the same directory as the Rollout's. A Trainer keeps its "
        "files in a subdirectory of its own and removes it when it stops (and a dead Trainer's when "
        "it starts).")
