"""What one allocator pass reads from Redis, in two pipelined round trips (three when a
worker is new): the allocator lock, the queue head, the workers and their free slots, and the
tenants' usage.

Round trip 1: hold the lock, the first `scan_limit` queued ids, every worker id.
Round trip 2: every worker's hash, the queued jobs' fields, the usage counters, and the slot
keys of every worker whose slots are known from an earlier pass (a worker's slots never change
while it stays registered, so they are cached by registration time).
Round trip 3 (only for workers registered since the last pass): their slot keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import redis.asyncio

from opentinker.core.redis_store import Keys
from opentinker_scheduler.clock import Clock
from opentinker_scheduler.codec import decode_resources, decode_worker, number, text
from opentinker_scheduler.lua import Scripts
from opentinker_scheduler.model import JobState, QueuedJob, Usage, Worker, WorkerState
from opentinker_scheduler.placement import worker_slots

JOB_FIELDS = ("job_id", "tenant_id", "state", "resources", "device_count", "create_time", "status_message")


@dataclass(frozen=True, kw_only=True)
class PassView:
    holds_lock: bool
    queued: list[QueuedJob] = field(default_factory=list)
    alive: list[Worker] = field(default_factory=list)
    free: dict[str, list[str]] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)


@dataclass(kw_only=True)
class QueueReader:
    client: redis.asyncio.Redis
    keys: Keys
    scripts: Scripts
    clock: Clock
    coordinator_capacity: int
    _slots: dict[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    """worker id -> (register time, slots) seen in an earlier pass."""

    async def read(self, *, owner: str, lock_ttl_ms: int, scan_limit: int) -> PassView:
        async with self.client.pipeline(transaction=False) as pipe:
            await self.scripts.hold_lock(keys=[self.keys.allocator_lock()], args=[owner, lock_ttl_ms],
                                         client=pipe)
            pipe.zrange(self.keys.job_queue(), 0, scan_limit - 1)
            pipe.zrange(self.keys.worker_index(), 0, -1)
            held, queued_ids, worker_ids = await pipe.execute()
        if not held:
            return PassView(holds_lock=False)
        return await self._read_state([i.decode() for i in queued_ids], sorted(i.decode() for i in worker_ids))

    async def _read_state(self, queued_ids: list[str], worker_ids: list[str]) -> PassView:
        cached = {w: self._slots[w] for w in worker_ids if w in self._slots}
        async with self.client.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                pipe.hgetall(self.keys.worker(worker_id))
            for job_id in queued_ids:
                pipe.hmget(self.keys.job(job_id), JOB_FIELDS)
            pipe.hgetall(self.keys.tenant_usage())
            for worker_id, (_, slots) in cached.items():
                _queue_slot_reads(pipe, self.keys, worker_id, slots)
            replies = await pipe.execute()
        now = self.clock.now_ms()
        workers = [decode_worker(raw, now_ms=now) for raw in replies[:len(worker_ids)] if raw]
        rest = replies[len(worker_ids):]
        jobs = [_queued_job(dict(zip(JOB_FIELDS, values, strict=True))) for values in rest[:len(queued_ids)]]
        usage = decode_usage(rest[len(queued_ids)])
        held = _held_slots(cached, rest[len(queued_ids) + 1:], now)
        alive = [w for w in workers if w.state is WorkerState.ALIVE]
        held |= await self._read_new_workers(alive, cached, now)
        free = {w.worker_id: [s for s in worker_slots(w, self.coordinator_capacity)
                              if (w.worker_id, s) not in held] for w in alive}
        return PassView(holds_lock=True, queued=[j for j in jobs if j is not None], alive=alive,
                        free=free, usage=usage)

    async def _read_new_workers(self, alive: Sequence[Worker], cached: Mapping[str, tuple[int, tuple[str, ...]]],
                                now: int) -> set[tuple[str, str]]:
        """Slots of workers seen for the first time (or re-registered): cached, then read."""
        fresh = {}
        for worker in alive:
            slots = worker_slots(worker, self.coordinator_capacity)
            entry = (worker.register_time_ms, slots)
            if cached.get(worker.worker_id) != entry:
                fresh[worker.worker_id] = entry
            self._slots[worker.worker_id] = entry
        for gone in set(self._slots) - {w.worker_id for w in alive}:
            del self._slots[gone]
        if not fresh:
            return set()
        async with self.client.pipeline(transaction=False) as pipe:
            for worker_id, (_, slots) in fresh.items():
                _queue_slot_reads(pipe, self.keys, worker_id, slots)
            replies = await pipe.execute()
        return _held_slots(fresh, replies, now)


def _queue_slot_reads(pipe, keys: Keys, worker_id: str, slots: Sequence[str]) -> None:  # noqa: ANN001
    for slot in slots:
        pipe.hget(keys.device_lease(worker_id, slot), "expire_at")


def _held_slots(workers: Mapping[str, tuple[int, tuple[str, ...]]], replies: Sequence, now: int) -> set[tuple[str, str]]:
    held, index = set(), 0
    for worker_id, (_, slots) in workers.items():
        for slot in slots:
            until = replies[index]
            index += 1
            if until is not None and int(until) > now:
                held.add((worker_id, slot))
    return held


def _queued_job(values: Mapping[str, bytes | None]) -> QueuedJob | None:
    raw = {name.encode(): value for name, value in values.items() if value is not None}
    if not raw.get(b"job_id"):
        return None  # deleted meanwhile
    return QueuedJob(job_id=text(raw, "job_id"), tenant_id=text(raw, "tenant_id"),
                     state=JobState(text(raw, "state")), resources=decode_resources(text(raw, "resources", "[]")),
                     device_count=number(raw, "device_count"), create_time_ms=number(raw, "create_time"),
                     status_message=text(raw, "status_message"))


def decode_usage(raw: Mapping[bytes, bytes]) -> dict[str, Usage]:
    """The `<tenant>:queued|jobs|devices` counters as a Usage per tenant."""
    counters: dict[str, dict[str, int]] = {}
    for name, value in raw.items():
        tenant, _, counter = name.decode().rpartition(":")
        counters.setdefault(tenant, {})[counter] = int(value)
    return {tenant: Usage(devices=c.get("devices", 0), running_jobs=c.get("jobs", 0),
                          queued_jobs=c.get("queued", 0)) for tenant, c in counters.items()}
