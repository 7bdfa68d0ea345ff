"""Placement: which worker serves each resource request of a job (pure; no Redis).

Every job also gets one slot of its driver: a gateway's for a SESSION job (the Tinker gateway
drives it), a Coordinator's for every other type (`driver_request`).

Every request is served by ONE worker of its role with enough free matching slots; among those,
the worker with the most free slots wins (spreading load), ties broken by worker id. A worker
without devices (a Coordinator) offers `capacity` slots `slot:0..N-1`, usable by requests that
ask for no particular device kind or memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opentinker_scheduler.model import DeviceKind, JobType, QueuedJob, ResourceRequest, Role, Worker

COORDINATOR_REQUEST = ResourceRequest(role=Role.COORDINATOR, device_count=1)
GATEWAY_REQUEST = ResourceRequest(role=Role.GATEWAY, device_count=1)
DRIVER_ROLES = (Role.COORDINATOR, Role.GATEWAY)


def driver_request(job_type: JobType) -> ResourceRequest:
    """The slot of the worker that drives a job of `job_type`."""
    return GATEWAY_REQUEST if job_type is JobType.SESSION else COORDINATOR_REQUEST


def job_requests(job: QueuedJob) -> list[ResourceRequest]:
    """Everything a job needs placed: its devices, then its driver's slot."""
    return [*job.resources, driver_request(job.type)]


@dataclass(frozen=True, kw_only=True)
class Placement:
    request: ResourceRequest
    worker: Worker
    slots: tuple[str, ...]
    device_ids: tuple[str, ...]


def capacity_slots(capacity: int) -> tuple[str, ...]:
    return tuple(f"slot:{index}" for index in range(capacity))


def worker_slots(worker: Worker, capacity: int, gateway_capacity: int | None = None) -> tuple[str, ...]:
    """Every slot a worker offers: its device ids, or capacity slots when it has none (a gateway:
    `gateway_capacity` of them, one per SESSION job it drives, when given)."""
    if worker.role is Role.GATEWAY and gateway_capacity is not None:
        capacity = gateway_capacity
    return tuple(d.device_id for d in worker.devices) or capacity_slots(capacity)


def matching_free(worker: Worker, request: ResourceRequest, free: Sequence[str]) -> list[str]:
    """The free slots of `worker` that satisfy `request`, in slot order."""
    if not worker.devices:
        any_device = request.device_kind is DeviceKind.UNSPECIFIED and not request.min_memory_bytes
        return list(free) if any_device else []
    return [d.device_id for d in worker.devices if d.device_id in free
            and request.device_kind in (DeviceKind.UNSPECIFIED, d.kind)
            and d.memory_bytes >= request.min_memory_bytes]


def place(requests: Sequence[ResourceRequest], workers: Sequence[Worker],
          free: Mapping[str, Sequence[str]]) -> list[Placement] | str:
    """A placement for every request, or why the job has to wait (for `status_message`)."""
    remaining = {worker_id: list(slots) for worker_id, slots in free.items()}
    placements: list[Placement] = []
    for request in requests:
        placement = _place_one(request, workers, remaining)
        if isinstance(placement, str):
            return placement
        remaining[placement.worker.worker_id] = [
            s for s in remaining[placement.worker.worker_id] if s not in placement.slots]
        placements.append(placement)
    return placements


def _place_one(request: ResourceRequest, workers: Sequence[Worker],
               remaining: Mapping[str, Sequence[str]]) -> Placement | str:
    candidates = [(w, matching_free(w, request, remaining.get(w.worker_id, ())))
                  for w in workers if w.role is request.role]
    fitting = [(w, slots) for w, slots in candidates if len(slots) >= request.device_count]
    if not fitting:
        return waiting_reason(request, [len(slots) for _, slots in candidates])
    worker, slots = min(fitting, key=lambda pair: (-len(pair[1]), pair[0].worker_id))
    chosen = tuple(slots[:request.device_count])
    device_ids = chosen if worker.devices else ()
    return Placement(request=request, worker=worker, slots=chosen, device_ids=device_ids)


def waiting_reason(request: ResourceRequest, free_counts: Sequence[int]) -> str:
    """E.g. 'waiting for 1 rollout slot (any device) on one worker: 2 alive rollout workers,
    at most 0 free on one'."""
    role = request.role.lower()
    kind = "any device" if request.device_kind is DeviceKind.UNSPECIFIED else request.device_kind.lower()
    if request.min_memory_bytes:
        kind += f", >= {request.min_memory_bytes} bytes"
    wanted = f"waiting for {request.device_count} {role} slot{'s' * (request.device_count > 1)} ({kind}) on one worker"
    if not free_counts:
        return f"{wanted}: no alive {role} worker is registered{NO_WORKER_HINTS.get(request.role, '')}"
    return (f"{wanted}: {len(free_counts)} alive {role} worker{'s' * (len(free_counts) > 1)}, "
            f"at most {max(free_counts)} free on one")


NO_WORKER_HINTS = {Role.GATEWAY: " (a SESSION job is driven by the Tinker gateway: start one)"}
