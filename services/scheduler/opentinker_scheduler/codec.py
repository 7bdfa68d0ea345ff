"""How domain records are laid out in Redis hashes (JSON for nested values, strings for scalars)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from opentinker_runtime.auth.job_tokens import NONCE_FIELD
from opentinker_runtime.edge.lease import LeaseContext
from opentinker_scheduler.events import decode_progress
from opentinker_scheduler.model import (
    Assignment,
    CheckpointRef,
    Device,
    DeviceKind,
    Job,
    JobState,
    JobType,
    Lease,
    LeasedJob,
    Quota,
    ResidentModel,
    ResourceRequest,
    Role,
    Usage,
    Worker,
    WorkerState,
)

RawHash = Mapping[bytes, bytes]
QUOTA_FIELDS = ("max_devices", "max_concurrent_jobs", "max_queued_jobs")
DECODE_CACHE_SIZE = 1024
"""Distinct JSON texts (resources, devices) whose decoded value is kept: they repeat pass after pass."""


def pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    """A hash as a Lua script returns it (field, value, field, value...) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def decode_quota(values: Sequence[bytes | None]) -> Quota:
    """A Quota from the QUOTA_FIELDS values of a tenant's hash (none set: unlimited)."""
    return Quota(**{name: int(value or 0) for name, value in zip(QUOTA_FIELDS, values, strict=True)})


def decode_usage(raw: Mapping[bytes, bytes]) -> dict[str, Usage]:
    """The `<tenant>:queued|jobs|devices` counters as a Usage per tenant."""
    counters: dict[str, dict[str, int]] = {}
    for name, value in raw.items():
        tenant, _, counter = name.decode().rpartition(":")
        counters.setdefault(tenant, {})[counter] = int(value)
    return {tenant: Usage(devices=c.get("devices", 0), running_jobs=c.get("jobs", 0),
                          queued_jobs=c.get("queued", 0)) for tenant, c in counters.items()}


def text(raw: RawHash, name: str, default: str = "") -> str:
    value = raw.get(name.encode())
    return value.decode() if value is not None else default


def number(raw: RawHash, name: str) -> int:
    return int(text(raw, name, "0"))


def encode_resources(resources: tuple[ResourceRequest, ...]) -> str:
    return json.dumps([{"role": r.role, "device_count": r.device_count, "device_kind": r.device_kind,
                        "min_memory_bytes": r.min_memory_bytes, "shared": r.shared, "model_keys": list(r.model_keys)}
                       for r in resources])


@functools.lru_cache(maxsize=DECODE_CACHE_SIZE)
def decode_resources(data: str | bytes) -> tuple[ResourceRequest, ...]:
    """(cached: the result is immutable and the same text repeats in every pass)"""
    return tuple(ResourceRequest(role=Role(r["role"]), device_count=r["device_count"],
                                 device_kind=DeviceKind(r["device_kind"]),
                                 min_memory_bytes=r["min_memory_bytes"], shared=r.get("shared", False),
                                 model_keys=tuple(r.get("model_keys", ())))
                 for r in json.loads(data))


def encode_assignments(assignments: tuple[Assignment, ...]) -> str:
    return json.dumps([{"role": a.role, "worker_id": a.worker_id, "address": a.address,
                        "device_ids": list(a.device_ids), "lease_id": a.lease.lease_id,
                        "fencing_token": a.lease.fencing_token} for a in assignments])


def assignment_prefix(draft, address: str) -> str:  # noqa: ANN001 - a leases.LeaseDraft
    """An assignment's JSON (as encode_assignments writes it) up to its fencing token, which
    the START script appends with the closing brace once it has drawn the token."""
    text = json.dumps({"role": draft.role, "worker_id": draft.worker_id, "address": address,
                       "device_ids": list(draft.device_ids), "lease_id": draft.lease_id})
    return text[:-1] + ', "fencing_token": '


@functools.lru_cache(maxsize=DECODE_CACHE_SIZE)
def decode_assignments(job_id: str, data: str | bytes) -> tuple[Assignment, ...]:
    """(cached: immutable, and a running job's assignments are read by every heartbeat)"""
    return tuple(Assignment(
        role=Role(a["role"]), worker_id=a["worker_id"], address=a["address"],
        device_ids=tuple(a["device_ids"]),
        lease=LeaseContext(job_id=job_id, lease_id=a["lease_id"], fencing_token=a["fencing_token"]))
        for a in json.loads(data or "[]"))


def job_fields(job: Job, *, spec_hash: str) -> dict[str, str | bytes | int]:
    """The hash fields a new job is stored with (the scripts add `order` and the sequence)."""
    return {"job_id": job.job_id, "tenant_id": job.tenant_id, "type": job.type,
            "priority": job.priority, "spec": job.spec_blob, "spec_hash": spec_hash,
            "resources": encode_resources(job.resources), "state": job.state,
            "create_time": job.create_time_ms, "update_time": job.update_time_ms,
            "attempt": job.attempt, "cancel_requested": "0", "assignments": "[]",
            "retries_left": job.retries_left,
            "device_count": sum(r.device_count for r in job.resources)}


def decode_job(raw: RawHash, *, metrics: Mapping[bytes, bytes], queue_rank: int | None) -> Job:
    job_id = text(raw, "job_id")
    progress = decode_progress(raw.get(b"progress"))
    latest = {**progress.latest_metrics, **{k.decode(): float(v) for k, v in metrics.items()}}
    state = JobState(text(raw, "state"))
    return Job(
        job_id=job_id, tenant_id=text(raw, "tenant_id"), type=JobType(text(raw, "type")),
        priority=number(raw, "priority"), spec_blob=raw.get(b"spec", b""),
        resources=decode_resources(text(raw, "resources", "[]")), state=state,
        create_time_ms=number(raw, "create_time"), update_time_ms=number(raw, "update_time"),
        start_time_ms=number(raw, "start_time"), end_time_ms=number(raw, "end_time"),
        progress=dataclasses.replace(progress, latest_metrics=latest),
        status_message=text(raw, "status_message"),
        queue_position=queue_rank + 1 if queue_rank is not None and state is JobState.QUEUED else 0,
        attempt=number(raw, "attempt"),
        assignments=decode_assignments(job_id, text(raw, "assignments", "[]")),
        last_event_sequence=number(raw, "last_event_sequence"),
        cancel_requested=text(raw, "cancel_requested") == "1",
        retries_left=number(raw, "retries_left"), resume_from=_resume_from(raw),
        job_token_nonce=text(raw, NONCE_FIELD))


LEASED_JOB_FIELDS = ("job_id", "state", "assignments", "cancel_requested", NONCE_FIELD)


def decode_leased_job(values: Sequence[bytes | None]) -> LeasedJob | None:
    """A LeasedJob from the LEASED_JOB_FIELDS values of a job's hash; None when there is no job."""
    job_id, state, assignments, cancel_requested, nonce = values
    if not job_id or not state:
        return None
    text_id = job_id.decode()
    return LeasedJob(job_id=text_id, state=JobState(state.decode()),
                     assignments=decode_assignments(text_id, assignments or b"[]"),
                     cancel_requested=cancel_requested == b"1", job_token_nonce=(nonce or b"").decode())


def _resume_from(raw: RawHash) -> CheckpointRef | None:
    checkpoint_id = text(raw, "resume_checkpoint_id")
    if not checkpoint_id:
        return None
    agents = json.loads(text(raw, "resume_agent_checkpoints", "{}"))
    return CheckpointRef(checkpoint_id=checkpoint_id, step=number(raw, "resume_step"), agent_checkpoint_ids=agents,
                         driver_state=json.loads(text(raw, "resume_driver_state", "{}")))


def encode_devices(devices: tuple[Device, ...]) -> str:
    return json.dumps([{"device_id": d.device_id, "kind": d.kind, "memory_bytes": d.memory_bytes,
                        "name": d.name, "shares": d.shares} for d in devices])


@functools.lru_cache(maxsize=DECODE_CACHE_SIZE)
def decode_devices(data: str | bytes) -> tuple[Device, ...]:
    """(cached: the result is immutable and a worker's devices repeat in every pass)"""
    return tuple(Device(device_id=d["device_id"], kind=DeviceKind(d["kind"]),
                        memory_bytes=d["memory_bytes"], name=d["name"], shares=d.get("shares", 0))
                 for d in json.loads(data))


def encode_resident(models: tuple[ResidentModel, ...]) -> str:
    return json.dumps([{"device_id": m.device_id, "model_key": m.model_key, "job_ids": list(m.job_ids)}
                       for m in models])


@functools.lru_cache(maxsize=DECODE_CACHE_SIZE)
def decode_resident(data: str | bytes) -> tuple[ResidentModel, ...]:
    """(cached: a worker's resident models repeat from pass to pass)"""
    return tuple(ResidentModel(device_id=m["device_id"], model_key=m["model_key"], job_ids=tuple(m["job_ids"]))
                 for m in json.loads(data))


WORKER_FIELDS = ("worker_id", "role", "address", "devices", "register_time", "last_heartbeat", "ttl_ms",
                 "draining", "labels", "version", "name", "tenant_id", "expire_at", "resident")
"""Every field decode_worker reads."""
_WORKER_FIELD_KEYS = tuple(name.encode() for name in WORKER_FIELDS)


def decode_worker_fields(values: Sequence[bytes | None], *, now_ms: int) -> Worker | None:
    """decode_worker from the WORKER_FIELDS values of a worker's hash; None when there is none."""
    if values[0] is None:
        return None
    return decode_worker({k: v for k, v in zip(_WORKER_FIELD_KEYS, values, strict=True) if v is not None},
                         now_ms=now_ms)


def decode_worker(raw: RawHash, *, now_ms: int, leases: tuple[Lease, ...] = ()) -> Worker:
    draining = text(raw, "draining") == "1"
    alive = number(raw, "expire_at") > now_ms
    state = WorkerState.DEAD if not alive else WorkerState.DRAINING if draining else WorkerState.ALIVE
    return Worker(
        worker_id=text(raw, "worker_id"), role=Role(text(raw, "role")), address=text(raw, "address"),
        devices=decode_devices(text(raw, "devices", "[]")), state=state,
        register_time_ms=number(raw, "register_time"),
        last_heartbeat_time_ms=number(raw, "last_heartbeat"),
        heartbeat_ttl_ms=number(raw, "ttl_ms"), draining=draining, leases=leases,
        labels=json.loads(text(raw, "labels", "{}")), version=text(raw, "version"), name=text(raw, "name"),
        tenant_id=text(raw, "tenant_id"), resident_models=decode_resident(text(raw, "resident", "[]")))


def decode_lease(raw: RawHash) -> Lease:
    return Lease(lease_id=text(raw, "lease_id"), job_id=text(raw, "job_id"),
                 worker_id=text(raw, "worker_id"), role=Role(text(raw, "role")),
                 slots=tuple(json.loads(text(raw, "slots", "[]"))),
                 device_ids=tuple(json.loads(text(raw, "device_ids", "[]"))),
                 fencing_token=number(raw, "fencing_token"), expire_time_ms=number(raw, "expire_at"))


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
