"""A session's memory: the default micro-batch token budget, the peak memory of a step, and
handing back what a step freed.

Budget. `SessionSpec.max_tokens_per_micro_batch` 0 no longer means "the whole batch at once":
the Trainer picks a budget so that one micro-batch's activations take at most
`ACTIVATION_SHARE` of the memory free once the model is loaded, less the optimizer state and
gradients still to come, between `MIN_DEFAULT_TOKENS` and `MAX_DEFAULT_TOKENS` padded tokens
(`MAX_DEFAULT_TOKENS_CUDA` on a GPU).
A micro-batch's activations are estimated per padded token (`activation_bytes_per_token`):
what a decoder layer keeps for backward, plus the head's logits, log-softmaxes and their
gradients over the vocabulary (which dominate for a large vocabulary). Micro-batches split
no datum and keep the gradients of the whole batch (`training`, `losses.LossNorm`).

Peak. `StepMemory` measures each training call: on CUDA `torch.cuda.max_memory_allocated` of
the session's device (tensors only), reset at the call's start; on the CPU the process's peak
resident set (VmHWM of /proc/self/status), reset at the call's start by writing "5" to
/proc/self/clear_refs; where that cannot be reset, `getrusage`'s ru_maxrss, the peak since the
process started. Calls run one at a time (the registry's torch thread), so a call's peak is its
own, however sessions interleave.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import torch

log = structlog.get_logger(__name__)

ACTIVATION_SHARE = 0.125
"""The share of the free memory (after the optimizer state) one micro-batch's activations may
take: the rest stays for other sessions, the Rollout on the same host and the allocator's slack."""
MIN_DEFAULT_TOKENS = 256
MAX_DEFAULT_TOKENS = 2048
MAX_DEFAULT_TOKENS_CUDA = 8192
"""Bounds of the default budget: below 256 tokens a step slows down for little memory; above
2048 a CPU step's matrix products are no faster per token, while a GPU's still gain."""
LAYER_HIDDEN_FLOATS = 28
LAYER_INTERMEDIATE_FLOATS = 6
HEAD_VOCAB_FLOATS = 6
"""Floats per padded token held at a ForwardBackward's peak: per decoder layer 28 x hidden
(norms, q/k/v before and after rotary, attention output, residuals, LoRA's inputs, their
gradients) + 6 x intermediate (gate, up, activation, product, their gradients); once 6 x the
vocabulary (logits, temperature-scaled copies, log-softmaxes, the entropy's terms, the logits'
gradient). Fitted to the peak resident memory of LoRA steps on CPU: 782 KiB per token for
small-llama (formula: 802), 646 for hidden 128, 2 layers, vocabulary 32000 (formula: 793)."""
MB = 1024 * 1024
PEAK_MEMORY = "trainer/peak_memory_mb"
"""Metric: the peak memory of the call (ForwardBackward) or of the step, every call since the
previous OptimStep included (OptimStep), in MiB."""
MICRO_BATCH_TOKENS = "trainer/micro_batch_tokens"
"""Metric: the session's micro-batch token budget (explicit, or the Trainer's default)."""
MEMINFO = Path("/proc/meminfo")
CGROUP_MAX = Path("/sys/fs/cgroup/memory.max")
CGROUP_CURRENT = Path("/sys/fs/cgroup/memory.current")
STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """What a micro-batch's activations scale with."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    vocab_size: int
    dtype_bytes: int = 4


def model_shape(model: Any) -> ModelShape:
    """The shape of a (peft) causal LM from its config; common fallbacks for other names."""
    config = model.config
    hidden = _first(config, ("hidden_size", "n_embd", "d_model"), 768)
    return ModelShape(
        hidden_size=hidden,
        intermediate_size=_first(config, ("intermediate_size", "n_inner", "ffn_dim"), 4 * hidden) or 4 * hidden,
        num_layers=_first(config, ("num_hidden_layers", "n_layer", "num_layers"), 12),
        vocab_size=int(config.vocab_size),
        dtype_bytes=next(model.parameters()).element_size())


def _first(config: Any, names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return default


def activation_bytes_per_token(shape: ModelShape) -> int:
    """Bytes one padded token of a micro-batch holds at the peak of its ForwardBackward
    (logits and what is computed from them in float32, whatever the model's dtype)."""
    layer = LAYER_HIDDEN_FLOATS * shape.hidden_size + LAYER_INTERMEDIATE_FLOATS * shape.intermediate_size
    return shape.num_layers * layer * shape.dtype_bytes + HEAD_VOCAB_FLOATS * shape.vocab_size * 4


def default_micro_batch_tokens(per_token_bytes: int, free_bytes: int, reserved_bytes: int = 0,
                               *, most: int = MAX_DEFAULT_TOKENS) -> int:
    """The budget whose activations take `ACTIVATION_SHARE` of `free_bytes` less
    `reserved_bytes` (memory the session will still allocate), within [MIN_DEFAULT_TOKENS, most]."""
    usable = max(free_bytes - reserved_bytes, 0) * ACTIVATION_SHARE
    tokens = int(usable // max(per_token_bytes, 1))
    return max(MIN_DEFAULT_TOKENS, min(most, tokens))


def session_micro_batch_tokens(explicit: int, model: Any, device: str) -> int:
    """`explicit` when > 0, else the default budget for `model` on `device` given the memory
    free now and the optimizer state (AdamW: 2 x trainable) and gradients (1 x) to come."""
    if explicit > 0:
        return explicit
    shape = model_shape(model)
    per_token = activation_bytes_per_token(shape)
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    free = free_memory_bytes(device)
    most = MAX_DEFAULT_TOKENS_CUDA if device.startswith("cuda") else MAX_DEFAULT_TOKENS
    tokens = default_micro_batch_tokens(per_token, free, reserved_bytes=3 * trainable, most=most)
    log.info("micro_batch_budget", tokens=tokens, activation_bytes_per_token=per_token,
             free_mb=free // MB, reserved_mb=3 * trainable // MB, device=device)
    return tokens


def free_memory_bytes(device: str) -> int:
    """Memory a session may still allocate: on CUDA the device's free memory plus what torch's
    cache holds unused; on the CPU MemAvailable, or the cgroup's remaining limit when lower."""
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index
        free, _ = torch.cuda.mem_get_info(index)
        return free + torch.cuda.memory_reserved(index) - torch.cuda.memory_allocated(index)
    return min(_mem_available(), _cgroup_remaining())


def _mem_available() -> int:
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 1024 * MB  # unknown (not Linux): assume a modest machine


def _cgroup_remaining() -> int:
    try:
        limit = CGROUP_MAX.read_text().strip()
        if limit == "max":
            return sys.maxsize
        return max(int(limit) - int(CGROUP_CURRENT.read_text()), 0)
    except (OSError, ValueError):
        return sys.maxsize


class StepMemory:
    """The peak memory of each training call of a session, and of its current step."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda") and torch.cuda.is_available()
        self.device = torch.device(device) if self.cuda else None
        self.step_peak_bytes = 0

    def start_call(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            _reset_peak_rss()

    def end_call(self) -> float:
        """The call's peak in MiB; it counts in the step's peak too."""
        peak = torch.cuda.max_memory_allocated(self.device) if self.cuda else _peak_rss()
        self.step_peak_bytes = max(self.step_peak_bytes, peak)
        return peak / MB

    def end_step(self) -> float:
        """The step's peak in MiB (every call since the previous end_step); starts the next."""
        peak, self.step_peak_bytes = self.step_peak_bytes, 0
        return peak / MB


def _reset_peak_rss() -> None:
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        pass  # _peak_rss then reads a peak that was not reset (VmHWM or ru_maxrss)


def _peak_rss() -> int:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def release_micro_batch_memory(device: str) -> None:
    """Between micro-batches on the CPU: glibc's free heap pages go back (`malloc_trim`), so the
    next micro-batch's tensors, placed elsewhere in a fragmented heap, do not add to the peak
    (measured: a step's peak climbed by ~100 MiB per micro-batch without). CUDA's caching
    allocator reuses its blocks: nothing to do there."""
    if not (device.startswith("cuda") and torch.cuda.is_available()):
        _malloc_trim()


def release_step_memory(device: str) -> None:
    """Hand back what a step freed: CUDA's cached blocks; on the CPU glibc's free heap pages
    (`malloc_trim`), which the raised trim threshold (`opentinker_runtime.core.memory`) keeps otherwise."""
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
    else:
        _malloc_trim()


def _malloc_trim() -> None:
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _load_libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc if libc is not None and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _load_libc()
