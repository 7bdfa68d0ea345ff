"""The lease table: slots of one worker held by one job, with fencing tokens and a TTL.

A slot is a device id (`cuda:0`, `cpu:1`) or, on a worker without devices, a capacity slot
(`slot:N`). Each slot has a key holding the lease that owns it and until when; a slot is free when
the key is missing or its lease expired. Acquire (all slots or none), renew and release are single
Lua scripts, so no slot is ever held by two unexpired leases. An expired lease is dead for good:
it cannot be renewed, and its slots may be taken by another lease before it is swept.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio

from opentinker.core.redis_store import Keys
from opentinker_scheduler.clock import Clock
from opentinker_scheduler.codec import decode_lease, number
from opentinker_scheduler.lua import Scripts
from opentinker_scheduler.model import Lease, LeaseContext, Role


class LeaseUnavailable(Exception):
    """A slot is held by an unexpired lease, or the worker is dead or draining."""


@dataclass(frozen=True, kw_only=True)
class LeaseTable:
    client: redis.asyncio.Redis
    keys: Keys
    scripts: Scripts
    clock: Clock

    def _slot_keys(self, worker_id: str, slots: Sequence[str]) -> list[str]:
        return [self.keys.device_lease(worker_id, slot) for slot in slots]

    async def acquire(self, *, job_id: str, worker_id: str, role: Role, slots: Sequence[str],
                      device_ids: Sequence[str], ttl_ms: int) -> Lease:
        """Take every slot in `slots` on `worker_id` or none (LeaseUnavailable)."""
        if not slots:
            raise ValueError("a lease needs at least one slot")
        lease_id = f"lease-{uuid.uuid4().hex}"
        now = self.clock.now_ms()
        keys = [self.keys.fencing_counter(), self.keys.lease(lease_id), self.keys.job_leases(job_id),
                self.keys.worker_leases(worker_id), self.keys.lease_expiry(),
                self.keys.worker(worker_id), *self._slot_keys(worker_id, slots)]
        args = [now, ttl_ms, lease_id, job_id, worker_id, role, json.dumps(list(slots)),
                json.dumps(list(device_ids))]
        status, detail = await self.scripts.lease_acquire(keys=keys, args=args)
        if status != b"ok":
            raise LeaseUnavailable(f"{status.decode()} {detail.decode()}".strip())
        return Lease(lease_id=lease_id, job_id=job_id, worker_id=worker_id, role=role,
                     slots=tuple(slots), device_ids=tuple(device_ids),
                     fencing_token=int(detail), expire_time_ms=now + ttl_ms)

    async def get(self, lease_id: str) -> Lease | None:
        raw = await self.client.hgetall(self.keys.lease(lease_id))
        return decode_lease(raw) if raw else None

    async def renew(self, lease_id: str, *, ttl_ms: int) -> bool:
        """Extend an unexpired lease to now + ttl; False when it expired or is gone."""
        lease = await self.get(lease_id)
        if lease is None:
            return False
        keys = [self.keys.lease(lease_id), self.keys.lease_expiry(),
                *self._slot_keys(lease.worker_id, lease.slots)]
        return bool(await self.scripts.lease_renew(keys=keys, args=[self.clock.now_ms(), ttl_ms,
                                                                     lease_id]))

    async def release(self, lease_id: str, *, only_if_expired: bool = False) -> Lease | None:
        """Free the lease's slots; the released lease, or None when it was gone (or, with
        only_if_expired, still valid)."""
        lease = await self.get(lease_id)
        if lease is None:
            return None
        keys = [self.keys.lease(lease_id), self.keys.job_leases(lease.job_id),
                self.keys.worker_leases(lease.worker_id), self.keys.lease_expiry(),
                *self._slot_keys(lease.worker_id, lease.slots)]
        cutoff = self.clock.now_ms() if only_if_expired else ""
        released = await self.scripts.lease_release(keys=keys, args=[lease_id, cutoff])
        return lease if released == 1 else None

    async def expired_ids(self, *, limit: int = 100) -> list[str]:
        """Ids of leases whose expiry has passed (not yet released)."""
        ids = await self.client.zrangebyscore(self.keys.lease_expiry(), "-inf", self.clock.now_ms(),
                                              start=0, num=limit)
        return [lease_id.decode() for lease_id in ids]

    async def of_job(self, job_id: str) -> list[Lease]:
        return await self._many(await self.client.smembers(self.keys.job_leases(job_id)))

    async def of_worker(self, worker_id: str) -> list[Lease]:
        return await self._many(await self.client.smembers(self.keys.worker_leases(worker_id)))

    async def _many(self, ids: set[bytes]) -> list[Lease]:
        leases = [await self.get(lease_id.decode()) for lease_id in sorted(ids)]
        return [lease for lease in leases if lease is not None]

    async def busy_slots(self, worker_id: str, slots: Sequence[str]) -> set[str]:
        """The slots held by an unexpired lease right now."""
        if not slots:
            return set()
        async with self.client.pipeline(transaction=False) as pipe:
            for key in self._slot_keys(worker_id, slots):
                pipe.hget(key, "expire_at")
            held_until = await pipe.execute()
        now = self.clock.now_ms()
        return {slot for slot, until in zip(slots, held_until, strict=True)
                if until is not None and int(until) > now}

    async def is_current(self, context: LeaseContext) -> bool:
        """The lease exists, belongs to the job, carries this fencing token and has not expired."""
        raw = await self.client.hgetall(self.keys.lease(context.lease_id))
        return (bool(raw) and raw.get(b"job_id", b"").decode() == context.job_id
                and number(raw, "fencing_token") == context.fencing_token
                and number(raw, "expire_at") > self.clock.now_ms())
