"""The collectives of a data-parallel session's gloo group, used by rank 0 and its replicas
alike: sharding datums over ranks, each rank's dropout stream, summing gradients, broadcasting
parameters, joining the group."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from opentinker_trainer.errors import TrainerError

DEFAULT_COLLECTIVE_TIMEOUT_S = 600.0
"""How long a rank waits in a collective (or for the group to form) before it fails: the Trainer's
OPENTINKER_TRAINER_COLLECTIVE_TIMEOUT_SECONDS."""
RNG_SEED_STRIDE = 1_000_003  # rank r's dropout stream is seeded with seed + r * stride


class ReplicaError(TrainerError):
    """A replica process failed or died; the session cannot go on."""


def shard_datums(lengths: Sequence[int], world_size: int) -> list[list[int]]:
    """Datum indices per rank: longest first, each to the rank with the fewest tokens so far
    (ties to the lowest rank), each rank's indices in ascending order. Rank 0 always gets one."""
    loads = [0] * world_size
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shards[rank].append(index)
        loads[rank] += lengths[index]
    return [sorted(shard) for shard in shards]


def rank_rng_state(seed: int, rank: int) -> torch.Tensor:
    """The initial CPU RNG state of `rank`'s dropout stream."""
    return torch.Generator().manual_seed(seed + rank * RNG_SEED_STRIDE).get_state()


def all_reduce_gradients(group: Any, parameters: Sequence[torch.nn.Parameter]) -> None:
    """Sum every parameter's gradient over the group, in one flat CPU buffer.

    A parameter no rank has a gradient for keeps grad None (as on a single device); one that
    some rank lacks counts zeros there.
    """
    present = torch.tensor([float(p.grad is not None) for p in parameters])
    flat = torch.cat([present] + [_flat_grad(p) for p in parameters])
    group.allreduce([flat]).wait()
    offset = len(parameters)
    for index, parameter in enumerate(parameters):
        size = parameter.numel()
        if flat[index] > 0:
            summed = flat[offset:offset + size].view_as(parameter)
            parameter.grad = summed.to(device=parameter.device, dtype=parameter.dtype)
        offset += size


def _flat_grad(parameter: torch.nn.Parameter) -> torch.Tensor:
    if parameter.grad is None:
        return torch.zeros(parameter.numel(), dtype=torch.float32)
    return parameter.grad.detach().float().reshape(-1).cpu()


def broadcast_parameters(group: Any, parameters: Sequence[torch.nn.Parameter]) -> None:
    """Copy rank 0's parameter values to every rank."""
    flat = torch.cat([p.detach().float().reshape(-1).cpu() for p in parameters])
    group.broadcast(flat, 0).wait()
    offset = 0
    with torch.no_grad():
        for parameter in parameters:
            size = parameter.numel()
            parameter.copy_(flat[offset:offset + size].view_as(parameter))
            offset += size


LOOPBACK = "127.0.0.1"


def join_group(store_address: str, rank: int, world_size: int, host: str = LOOPBACK,
               timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S) -> Any:
    """A worker's member of the session's gloo group, over rank 0's TCPStore at `store_address`
    (host:port); its gloo traffic goes over the interface of `host` (this host's address)."""
    store_host, _, port = store_address.rpartition(":")
    store = dist.TCPStore(store_host, int(port), world_size, is_master=False,
                          timeout=timedelta(max(timeout_s, FORM_TIMEOUT_S)))
    return gloo_group(store, rank, world_size, host, timeout_s)


def gloo_group(store: Any, rank: int, world_size: int, host: str = LOOPBACK,
               timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S) -> Any:
    """This rank's gloo process group over `store`, its transport bound to `host`'s interface
    (loopback for a group on one host; the advertised address for a group across hosts)."""
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
    options._timeout = timedelta(max(timeout_s, FORM_TIMEOUT_S))  # the ranks start (torch imports) first
    group = dist.ProcessGroupGloo(store, rank, world_size, options)
    group.set_timeout(timedelta(timeout_s))
    return group


FORM_TIMEOUT_S = 300.0
"""How long the ranks of a new group wait for each other to join (a replica process starts first)."""


def timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


