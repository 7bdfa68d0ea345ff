"""Placement: which worker serves each resource request of a job (pure; no Redis).

Every job also gets one slot of its driver: a gateway's for a SESSION job (the Tinker gateway
drives it), a Coordinator's for every other type (`driver_request`).

Every request is served by ONE worker of its role with enough free matching devices; among
those, the worker with the most free ones wins (spreading load), ties broken by worker id. A
Trainer request of several devices that no one worker has free is spread across Trainer workers
(`spans_workers`: a data-parallel job, one rank per device on any host): on as few workers as
will do, those with the most free devices first, one placement (one lease) per worker. A
worker without devices (a Coordinator) offers `capacity` slots `slot:0..N-1`, usable by requests
that ask for no particular device kind or memory.

A device may offer shares (`Device.shares`: slots `<device_id>#<i>`): a *shared* request (a
LoRA job's one device) takes one share: on a worker and device where its job's base model is
resident (`Worker.resident_models`, from heartbeats) when one has a free share, then packed onto
the worker and device already most shared; any other request takes whole devices, every share
of each free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opentinker_scheduler.model import Device, DeviceKind, JobType, QueuedJob, ResourceRequest, Role, Worker

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


SHARE = "#"
"""A share of a device is the slot `<device_id>#<index>`."""


def device_slots(device: Device) -> tuple[str, ...]:
    """The slots of one device: the device itself, or one per share when it offers shares."""
    if device.shares > 1:
        return tuple(f"{device.device_id}{SHARE}{index}" for index in range(device.shares))
    return (device.device_id,)


def slot_device(slot: str) -> str:
    """The device a slot belongs to (a share's device, or the slot itself)."""
    return slot.split(SHARE, 1)[0]


def worker_slots(worker: Worker, capacity: int, gateway_capacity: int | None = None) -> tuple[str, ...]:
    """Every slot a worker offers: its devices' (`device_slots`), or capacity slots when it has
    none (a gateway: `gateway_capacity` of them, one per SESSION job it drives, when given)."""
    if worker.role is Role.GATEWAY and gateway_capacity is not None:
        capacity = gateway_capacity
    if worker.devices:
        return tuple(slot for device in worker.devices for slot in device_slots(device))
    return capacity_slots(capacity)


def matching_units(worker: Worker, request: ResourceRequest, free: Sequence[str]) -> list[tuple[str, ...]]:
    """What `request` may take on `worker` from its `free` slots, one unit per device it would
    count as, best first. A shared request takes one share (devices already shared by others
    first, the fullest first: LoRA jobs pack onto a device whose base is likely resident; a device
    without shares serves it whole); any other request takes whole devices, all of whose slots
    are free."""
    if not worker.devices:
        any_device = request.device_kind is DeviceKind.UNSPECIFIED and not request.min_memory_bytes
        return [(slot,) for slot in free] if any_device else []
    open_slots = set(free)
    devices = [d for d in worker.devices if request.device_kind in (DeviceKind.UNSPECIFIED, d.kind)
               and d.memory_bytes >= request.min_memory_bytes]
    if not request.shared:
        wholes = [device_slots(d) for d in devices]
        return [slots for slots in wholes if all(slot in open_slots for slot in slots)]
    resident = resident_devices(worker, request)
    ranked = []
    for device in devices:
        slots = device_slots(device)
        left = [s for s in slots if s in open_slots]
        if left:
            shared_already = 0 if device.shares > 1 and len(left) < len(slots) else 1
            ranked.append(((device.device_id not in resident, shared_already, device.shares <= 1, len(left)),
                           (left[0],)))
    return [unit for _, unit in sorted(ranked, key=lambda pair: pair[0])]


def resident_devices(worker: Worker, request: ResourceRequest) -> set[str]:
    """The worker's devices that hold one of the request's bases."""
    return {m.device_id for m in worker.resident_models if m.model_key in request.model_keys}


def place(requests: Sequence[ResourceRequest], workers: Sequence[Worker],
          free: Mapping[str, Sequence[str]]) -> list[Placement] | str:
    """A placement for every request (several for a request spread across workers), or why the
    job has to wait (for `status_message`)."""
    remaining = {worker_id: list(slots) for worker_id, slots in free.items()}
    placements: list[Placement] = []
    for request in requests:
        placed = _place_one(request, workers, remaining)
        if isinstance(placed, str):
            return placed
        for placement in placed:
            remaining[placement.worker.worker_id] = [
                s for s in remaining[placement.worker.worker_id] if s not in placement.slots]
        placements.extend(placed)
    return placements


def spans_workers(request: ResourceRequest) -> bool:
    """Whether `request` may be spread across workers: whole Trainer devices, several of them
    (each a data-parallel rank; the Trainer holding the first starts the others' ranks)."""
    return request.role is Role.TRAINER and request.device_count > 1 and not request.shared


def _place_one(request: ResourceRequest, workers: Sequence[Worker],
               remaining: Mapping[str, Sequence[str]]) -> list[Placement] | str:
    candidates = [(w, matching_units(w, request, remaining.get(w.worker_id, ())))
                  for w in workers if w.role is request.role]
    fitting = [(w, units) for w, units in candidates if len(units) >= request.device_count]
    if not fitting:
        spread = _place_across(request, candidates) if spans_workers(request) else None
        return spread or waiting_reason(request, [len(units) for _, units in candidates])
    if request.shared:  # where the base is resident, then pack: the fewest free units that fit
        worker, units = min(fitting, key=lambda pair: (not _on_resident(pair[0], request, pair[1][0]),
                                                       len(pair[1]), pair[0].worker_id))
    else:  # spread: the worker with the most free units
        worker, units = min(fitting, key=lambda pair: (-len(pair[1]), pair[0].worker_id))
    return [_placement(request, worker, units[:request.device_count])]


def _place_across(request: ResourceRequest,
                  candidates: Sequence[tuple[Worker, list[tuple[str, ...]]]]) -> list[Placement] | None:
    """`request` on several workers, those with the most free units first (the fewest workers,
    so the fewest ranks on the network), ties broken by worker id; None when all of them
    together have too few."""
    ordered = sorted(((w, units) for w, units in candidates if units and w.devices),
                     key=lambda pair: (-len(pair[1]), pair[0].worker_id))
    if sum(len(units) for _, units in ordered) < request.device_count:
        return None
    placements, left = [], request.device_count
    for worker, units in ordered:
        taken = units[:left]
        placements.append(_placement(request, worker, taken))
        left -= len(taken)
        if not left:
            break
    return placements


def _placement(request: ResourceRequest, worker: Worker, chosen: Sequence[tuple[str, ...]]) -> Placement:
    slots = tuple(slot for unit in chosen for slot in unit)
    device_ids = tuple(dict.fromkeys(slot_device(slot) for slot in slots)) if worker.devices else ()
    return Placement(request=request, worker=worker, slots=slots, device_ids=device_ids)


def _on_resident(worker: Worker, request: ResourceRequest, unit: tuple[str, ...]) -> bool:
    return bool(worker.devices) and slot_device(unit[0]) in resident_devices(worker, request)


def waiting_reason(request: ResourceRequest, free_counts: Sequence[int]) -> str:
    """E.g. 'waiting for 1 rollout slot (any device) on one worker: 2 alive rollout workers,
    at most 0 free on one'."""
    role = request.role.lower()
    kind = "any device" if request.device_kind is DeviceKind.UNSPECIFIED else request.device_kind.lower()
    if request.min_memory_bytes:
        kind += f", >= {request.min_memory_bytes} bytes"
    where = f"across {role} workers" if spans_workers(request) else "on one worker"
    wanted = f"waiting for {request.device_count} {role} slot{'s' * (request.device_count > 1)} ({kind}) {where}"
    if not free_counts:
        return f"{wanted}: no alive {role} worker is registered{NO_WORKER_HINTS.get(request.role, '')}"
    alive = f"{len(free_counts)} alive {role} worker{'s' * (len(free_counts) > 1)}"
    if spans_workers(request):
        return f"{wanted}: {alive}, {sum(free_counts)} free in all"
    return f"{wanted}: {alive}, at most {max(free_counts)} free on one"


NO_WORKER_HINTS = {Role.GATEWAY: " (a SESSION job is driven by the Tinker gateway: start one)"}
