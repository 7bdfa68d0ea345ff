"""What one allocator pass reads from Redis, in one round trip (the READ_PASS script): the
allocator lock, the queue head with each queued job's tenant quota, the workers and their free
slots, and the tenants' usage.

Nothing but the lock when another replica allocates or nothing is queued. Decoding is cheap on
repeat: a job's resources and a worker's devices are JSON that rarely changes, decoded once per
distinct text (`codec`'s caches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import redis.asyncio

from opentinker_runtime.core.redis_store import Keys
from opentinker_scheduler.clock import Clock
from opentinker_scheduler.codec import (
    QUOTA_FIELDS,
    WORKER_FIELDS,
    decode_quota,
    decode_resources,
    decode_usage,
    decode_worker_fields,
    pairs,
)
from opentinker_scheduler.lua import Scripts
from opentinker_scheduler.model import JobState, JobType, QueuedJob, Quota, Usage, Worker, WorkerState
from opentinker_scheduler.placement import worker_slots

JOB_FIELDS = ("job_id", "tenant_id", "state", "resources", "device_count", "create_time", "status_message", "type")


@dataclass(frozen=True, kw_only=True)
class PassView:
    holds_lock: bool
    queued: list[QueuedJob] = field(default_factory=list)
    alive: list[Worker] = field(default_factory=list)
    free: dict[str, list[str]] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    quotas: dict[str, Quota] = field(default_factory=dict)
    """The quota of each tenant with a queued job in `queued` (no record: unlimited)."""


@dataclass(kw_only=True)
class QueueReader:
    client: redis.asyncio.Redis
    keys: Keys
    scripts: Scripts
    clock: Clock
    coordinator_capacity: int
    gateway_capacity: int | None = None
    suspect_after_ms: int | None = None
    """A worker unheard for longer (yet within its TTL) gets no new lease: it has missed several
    heartbeats and is likely gone (a host cut off), and a job placed on it would only wait for
    its TTL and cost an attempt. None: every unexpired worker may be placed on."""

    async def read(self, *, owner: str, lock_ttl_ms: int, scan_limit: int, workers_wanted: bool = False) -> PassView:
        """Nothing but `holds_lock` when another replica allocates; no workers or slots read
        when nothing is queued, unless `workers_wanted` (a view to place the next submissions on)."""
        keys = [self.keys.allocator_lock(), self.keys.job_queue(), self.keys.worker_index(),
                self.keys.tenant_usage()]
        now = self.clock.now_ms()
        args = [owner, lock_ttl_ms, scan_limit, self.keys.job("x")[:-1], self.keys.worker("x")[:-1],
                self.keys.worker_slots("x")[:-1], self.keys.tenant("x")[:-1], now, int(workers_wanted), len(JOB_FIELDS),
                *JOB_FIELDS, len(QUOTA_FIELDS), *QUOTA_FIELDS, *WORKER_FIELDS]
        reply = await self.scripts.read_pass(keys=keys, args=args)
        if not reply[0]:
            return PassView(holds_lock=False)
        if len(reply) == 1:
            return PassView(holds_lock=True)
        rows, quota_rows, worker_rows, usage = reply[1:]
        alive, free = self._alive_workers(worker_rows, now)
        return PassView(holds_lock=True, queued=[j for j in map(queued_job, rows) if j is not None],
                        alive=alive, free=free, usage=decode_usage(pairs(usage)),
                        quotas={row[0].decode(): decode_quota(row[1:]) for row in quota_rows})

    def _alive_workers(self, rows: Sequence[Sequence[list]], now: int) -> tuple[list[Worker], dict[str, list[str]]]:
        """The alive workers by id, and the free slots of each (the script lists the held ones)."""
        alive, free = [], {}
        for fields, held_slots in rows:
            worker = decode_worker_fields(fields, now_ms=now)
            if worker is not None and worker.state is WorkerState.ALIVE:
                held = {slot.decode() for slot in held_slots}
                alive.append(worker)
                free[worker.worker_id] = [] if self._suspect(worker, now) else [
                    s for s in worker_slots(worker, self.coordinator_capacity, self.gateway_capacity) if s not in held]
        return sorted(alive, key=lambda w: w.worker_id), free


    def _suspect(self, worker: Worker, now: int) -> bool:
        return self.suspect_after_ms is not None and now - worker.last_heartbeat_time_ms > self.suspect_after_ms


def queued_job(values: Sequence[bytes | None]) -> QueuedJob | None:
    """A QueuedJob from the JOB_FIELDS values of its hash; None when the job was deleted meanwhile."""
    job_id, tenant_id, state, resources, device_count, create_time, status_message, job_type = values
    if not job_id:
        return None
    return QueuedJob(job_id=job_id.decode(), tenant_id=(tenant_id or b"").decode(),
                     state=JobState((state or b"").decode()), resources=decode_resources(resources or "[]"),
                     device_count=int(device_count or 0), create_time_ms=int(create_time or 0),
                     status_message=(status_message or b"").decode(),
                     type=JobType((job_type or b"UNSPECIFIED").decode()))
