"""What one allocator pass reads from Redis, in two pipelined round trips: the allocator lock,
the queue head, the workers and their free slots, and the tenants' usage.

Round trip 1: hold the lock, the first `scan_limit` queued ids, every worker id.
Round trip 2: per worker its hash and its slot hash; the queued jobs' fields; the usage counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import redis.asyncio
import redis.exceptions

from opentinker.core.redis_store import Keys
from opentinker_scheduler.clock import Clock
from opentinker_scheduler.codec import decode_resources, decode_worker, number, text
from opentinker_scheduler.leases import held_slots
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

    async def read(self, *, owner: str, lock_ttl_ms: int, scan_limit: int) -> PassView:
        """Nothing but `holds_lock` when another replica allocates; no workers or slots read
        when nothing is queued (one round trip)."""
        try:
            held, queued_ids, worker_ids = await self._hold_lock_and_list(owner, lock_ttl_ms, scan_limit)
        except redis.exceptions.NoScriptError:  # Redis restarted or was flushed: load and retry
            await self.scripts.hold_lock.registered_client.script_load(self.scripts.hold_lock.script)
            held, queued_ids, worker_ids = await self._hold_lock_and_list(owner, lock_ttl_ms, scan_limit)
        if not held:
            return PassView(holds_lock=False)
        if not queued_ids:
            return PassView(holds_lock=True)
        return await self._read_state([i.decode() for i in queued_ids], sorted(i.decode() for i in worker_ids))

    async def _hold_lock_and_list(self, owner: str, lock_ttl_ms: int, scan_limit: int) -> list:
        # EVALSHA directly: a Script object in a pipeline costs a SCRIPT EXISTS round trip each time
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.evalsha(self.scripts.hold_lock.sha, 1, self.keys.allocator_lock(), owner, lock_ttl_ms)
            pipe.zrange(self.keys.job_queue(), 0, scan_limit - 1)
            pipe.zrange(self.keys.worker_index(), 0, -1)
            return await pipe.execute()

    async def _read_state(self, queued_ids: list[str], worker_ids: list[str]) -> PassView:
        async with self.client.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                pipe.hgetall(self.keys.worker(worker_id)).hgetall(self.keys.worker_slots(worker_id))
            for job_id in queued_ids:
                pipe.hmget(self.keys.job(job_id), JOB_FIELDS)
            pipe.hgetall(self.keys.tenant_usage())
            replies = await pipe.execute()
        now = self.clock.now_ms()
        per_worker, rest = replies[:2 * len(worker_ids)], replies[2 * len(worker_ids):]
        alive, free = [], {}
        for raw, slots in zip(per_worker[::2], per_worker[1::2], strict=True):
            worker = decode_worker(raw, now_ms=now) if raw else None
            if worker is not None and worker.state is WorkerState.ALIVE:
                held = held_slots(slots, now)
                alive.append(worker)
                free[worker.worker_id] = [s for s in worker_slots(worker, self.coordinator_capacity) if s not in held]
        jobs = [_queued_job(dict(zip(JOB_FIELDS, values, strict=True))) for values in rest[:len(queued_ids)]]
        return PassView(holds_lock=True, queued=[j for j in jobs if j is not None], alive=alive, free=free,
                        usage=decode_usage(rest[len(queued_ids)]))


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
