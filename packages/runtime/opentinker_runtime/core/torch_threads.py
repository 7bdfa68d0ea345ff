"""How many CPU threads torch may use in a service process (Trainer, Rollout).

torch's default is one intra-op thread per core in every process. The embedded stack runs a
Trainer and a Rollout (and their helpers) on the same cores, and on small matrices a second
thread mostly spins: measured on 2 shared cores (bench/rl_step_vs_trl.py, B=8 x G=8, tiny-llama),
the Trainer burned 1.0-2.1 CPU-s per RL step with 2 threads and 0.86-0.98 with 1, the Rollout
1.2-1.8 and 1.1-1.25; 2 threads shortened the update (0.55 s instead of 0.87 s) only while the
other core was idle, which overlapping rollout and training (asynchronous RL) ends. So a
service takes `torch_threads` threads, and 0 means automatic: the conventional
OMP_NUM_THREADS when the operator set it, else half the CPUs this process may run on (the
Trainer and the Rollout each get their half; at least 1).

The number is applied once at start (intra-op and inter-op) and exported as OMP_NUM_THREADS,
so processes the service spawns (data-parallel Trainer replicas) start with the same count.
torch is imported only inside `apply_torch_threads`: the SDK stays importable without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import structlog

from opentinker_runtime.core.settings import setting

OMP_ENV = "OMP_NUM_THREADS"
MAX_TORCH_THREADS = 1024

log = structlog.get_logger(__name__)


def torch_threads_setting() -> Any:
    """The `torch_threads` field of a service that runs torch."""
    return setting(
        0, "CPU threads torch uses in this process (intra-op and inter-op). 0 = automatic: "
        "OMP_NUM_THREADS when set, else half the CPUs the process may run on, at least 1 (the "
        "Trainer and the Rollout share a host's cores; on small models extra threads mostly spin).",
        min=0, max=MAX_TORCH_THREADS)


@dataclass(frozen=True, kw_only=True)
class TorchThreads:
    """The thread count a service runs with and where it came from."""

    threads: int
    source: str
    """"setting" (torch_threads > 0), "OMP_NUM_THREADS" or "half of N CPUs"."""


def resolve_torch_threads(requested: int, *, environ: Mapping[str, str] | None = None,
                          cpus: int | None = None) -> TorchThreads:
    """The count for a `torch_threads` setting: itself when > 0, else automatic (see module doc)."""
    if requested > 0:
        return TorchThreads(threads=requested, source="setting")
    environ = os.environ if environ is None else environ
    from_env = _positive_int(environ.get(OMP_ENV, ""))
    if from_env is not None:
        return TorchThreads(threads=min(from_env, MAX_TORCH_THREADS), source=OMP_ENV)
    cpus = usable_cpus() if cpus is None else cpus
    return TorchThreads(threads=max(1, cpus // 2), source=f"half of {cpus} CPUs")


def apply_torch_threads(requested: int, *, service: str,
                        environ: MutableMapping[str, str] | None = None) -> TorchThreads:
    """Set torch's intra-op and inter-op thread counts for this process and export
    OMP_NUM_THREADS for its children; logs what it applied. Call before any torch work."""
    import torch

    environ = os.environ if environ is None else environ
    chosen = resolve_torch_threads(requested, environ=environ)
    set_torch_threads(chosen.threads)
    environ[OMP_ENV] = str(chosen.threads)
    log.info("torch_threads", service=service, intra_op=torch.get_num_threads(),
             inter_op=torch.get_num_interop_threads(), source=chosen.source)
    return chosen


def set_torch_threads(threads: int) -> None:
    """torch's intra-op and inter-op thread counts (inter-op only while no inter-op work ran)."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # inter-op work already started: the count is fixed for this process
        pass


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _positive_int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() and int(text) > 0 else None
