"""The devices a worker offers the scheduler: `cuda:N` when torch sees GPUs, else `cpu:N` slots.

torch is imported only inside `discover_devices` and only if installed, so the SDK stays usable
without it (a laptop that submits jobs, an EnvHost).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

CPU = "cpu"
CUDA = "cuda"


@dataclass(frozen=True, kw_only=True)
class Device:
    """One device slot; `device_id` is unique within its worker ("cuda:0", "cpu:1")."""

    device_id: str
    kind: str  # CPU or CUDA
    memory_bytes: int = 0
    """Total memory of a GPU; 0 for CPU slots (they share the host's memory)."""
    name: str = ""
    shares: int = 0
    """How many LoRA jobs may each lease a share of it at once; 0 or 1: leased whole."""


@dataclass(frozen=True, kw_only=True)
class ResidentModel:
    """A base model a worker holds on one device for the LoRA jobs that share it (`job_ids`);
    `model_key` is `ModelSource.model_key`. Sent with every heartbeat (placement puts a LoRA
    job where its base is resident; ListWorkers shows which jobs share a base)."""

    device_id: str
    model_key: str
    job_ids: tuple[str, ...] = ()


def group_resident(held: Iterable[tuple[str, str, str]]) -> list[ResidentModel]:
    """ResidentModels from (device id, model key, job id) of each holder, sorted."""
    jobs: dict[tuple[str, str], set[str]] = {}
    for device_id, model_key, job_id in held:
        jobs.setdefault((device_id, model_key), set()).update([job_id] if job_id else [])
    return [ResidentModel(device_id=device_id, model_key=model_key, job_ids=tuple(sorted(ids)))
            for (device_id, model_key), ids in sorted(jobs.items())]


def discover_devices(cpu_slots: int, *, shares: int = 0) -> list[Device]:
    """Every CUDA device torch sees, or `cpu_slots` CPU slots when there is none (or no torch);
    each offering `shares` shares to LoRA jobs (0 or 1: none)."""
    if cpu_slots < 0:
        raise ValueError(f"cpu_slots must be >= 0, got {cpu_slots}")
    gpus = cuda_devices()
    if gpus:
        return [dataclasses.replace(gpu, shares=shares) for gpu in gpus]
    return [Device(device_id=f"{CPU}:{index}", kind=CPU, name="CPU slot", shares=shares)
            for index in range(cpu_slots)]


def cuda_devices() -> list[Device]:
    """CUDA devices with their name and total memory; [] without torch or without a GPU."""
    if importlib.util.find_spec("torch") is None:
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    devices = []
    for index in range(torch.cuda.device_count()):
        properties = torch.cuda.get_device_properties(index)
        devices.append(Device(device_id=f"{CUDA}:{index}", kind=CUDA, name=properties.name,
                              memory_bytes=int(properties.total_memory)))
    log.info("cuda_devices_found", count=len(devices), names=sorted({d.name for d in devices}))
    return devices
