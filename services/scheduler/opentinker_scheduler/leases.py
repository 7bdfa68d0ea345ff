"""The lease table: slots of one worker held by one job, with fencing tokens and a TTL.

A slot is a device id (`cuda:0`, `cpu:1`) or, on a worker without devices, a capacity slot
(`slot:N`). A worker's slots live in one hash, slot -> "<expire_at>|<lease_id>"; a slot is free
when it has no entry or its lease expired. Acquire (all leases of a job, or none), renew (a
heartbeat renews the worker and its leases) and release are single Lua scripts, so no slot is ever
held by two unexpired leases. An expired lease is dead for good: it cannot be renewed, and its
slots may be taken by another lease before it is swept.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis.asyncio

from opentinker_runtime.core.redis_store import Keys
from opentinker_runtime.edge.lease import LeaseContext
from opentinker_scheduler.clock import Clock
from opentinker_scheduler.codec import decode_lease, number
from opentinker_scheduler.lua import Scripts
from opentinker_scheduler.model import Lease, Role


class LeaseUnavailable(Exception):
    """A slot is held by an unexpired lease, or the worker is dead or draining."""


def new_lease_id() -> str:
    return f"lease-{uuid.uuid4().hex}"


@dataclass(frozen=True, kw_only=True)
class LeaseDraft:
    """A lease about to be taken: `slots` of `worker_id` for one role of a job."""

    worker_id: str
    role: Role
    slots: tuple[str, ...]
    device_ids: tuple[str, ...] = ()
    lease_id: str = field(default_factory=new_lease_id)


def draft_keys(keys: Keys, drafts: Sequence[LeaseDraft]) -> list[str]:
    """The KEYS the Lua lease functions expect for `drafts`: per lease its record, its worker,
    the worker's lease set and the worker's slot hash."""
    return [key for d in drafts for key in (
        keys.lease(d.lease_id), keys.worker(d.worker_id), keys.worker_leases(d.worker_id),
        keys.worker_slots(d.worker_id))]


def slot_owner(value: bytes | None) -> tuple[int, str]:
    """(expire_at, lease_id) of a worker-slots hash value; (0, '') for none."""
    if not value:
        return 0, ""
    expire, _, lease_id = value.decode().partition("|")
    return int(expire), lease_id


def held_slots(raw: dict[bytes, bytes], now_ms: int) -> set[str]:
    """The slots of a worker-slots hash held by an unexpired lease at `now_ms`."""
    return {slot.decode() for slot, value in raw.items() if slot_owner(value)[0] > now_ms}


def drafts_json(drafts: Sequence[LeaseDraft]) -> str:
    if any(not d.slots for d in drafts):
        raise ValueError("a lease needs at least one slot")
    return json.dumps([{"lease_id": d.lease_id, "worker_id": d.worker_id, "role": d.role,
                        "slots_json": json.dumps(list(d.slots)),
                        "device_ids_json": json.dumps(list(d.device_ids))} for d in drafts])


@dataclass(frozen=True, kw_only=True)
class LeaseTable:
    client: redis.asyncio.Redis
    keys: Keys
    scripts: Scripts
    clock: Clock

    async def acquire_all(self, *, job_id: str, drafts: Sequence[LeaseDraft], ttl_ms: int) -> list[Lease]:
        """Take every lease in `drafts` or none (LeaseUnavailable): the same Lua functions
        START uses when the allocator starts a job."""
        now = self.clock.now_ms()
        keys = [self.keys.fencing_counter(), self.keys.job_leases(job_id), self.keys.lease_expiry(),
                *draft_keys(self.keys, drafts)]
        status, detail = await self.scripts.lease_acquire(keys=keys, args=[now, ttl_ms, job_id,
                                                                           drafts_json(drafts)])
        if status != b"ok":
            raise LeaseUnavailable(f"{status.decode()} {detail.decode()}".strip())
        tokens = json.loads(detail)
        return [Lease(lease_id=d.lease_id, job_id=job_id, worker_id=d.worker_id, role=d.role,
                      slots=d.slots, device_ids=d.device_ids, fencing_token=int(token),
                      expire_time_ms=now + ttl_ms) for d, token in zip(drafts, tokens, strict=True)]

    async def acquire(self, *, job_id: str, worker_id: str, role: Role, slots: Sequence[str],
                      device_ids: Sequence[str], ttl_ms: int) -> Lease:
        """Take every slot in `slots` on `worker_id` or none (LeaseUnavailable)."""
        draft = LeaseDraft(worker_id=worker_id, role=role, slots=tuple(slots), device_ids=tuple(device_ids))
        return (await self.acquire_all(job_id=job_id, drafts=[draft], ttl_ms=ttl_ms))[0]

    async def get(self, lease_id: str) -> Lease | None:
        raw = await self.client.hgetall(self.keys.lease(lease_id))
        return decode_lease(raw) if raw else None

    async def renew(self, lease_id: str, *, ttl_ms: int) -> bool:
        """A heartbeat of the lease's worker renewing this lease; False when it expired or is gone."""
        lease = await self.get(lease_id)
        if lease is None:
            return False
        _, renewed = await self.heartbeat(lease.worker_id, [lease_id], ttl_ms=ttl_ms)
        return lease_id in renewed

    async def heartbeat(self, worker_id: str, lease_ids: Sequence[str], *, ttl_ms: int) -> tuple[bool, set[str]]:
        """Renew the worker and every unexpired lease of `lease_ids` until now + ttl, in one
        script: (worker alive, renewed lease ids). A dead worker renews nothing."""
        keys = [self.keys.worker(worker_id), self.keys.worker_index(), self.keys.lease_expiry(),
                self.keys.worker_slots(worker_id), *(self.keys.lease(i) for i in lease_ids)]
        reply = await self.scripts.renew_leases(keys=keys, args=[self.clock.now_ms(), ttl_ms, worker_id, *lease_ids])
        return bool(reply[0]), {lease_id.decode() for lease_id in reply[1:]}

    async def heartbeat_with_jobs(self, worker_id: str, *, ttl_ms: int, job_fields: Sequence[str],
                                  resident: str = "[]") -> list[tuple[str, list[bytes | None]]] | None:
        """A worker's heartbeat in one script: renew the worker and every unexpired lease it
        holds until now + ttl; the id of each renewed lease with the `job_fields` values of its
        job (read in the same step). None when the worker is dead or unknown (it renews nothing).
        `resident`: the worker's resident models (`codec.encode_resident`), stored with it."""
        keys = [self.keys.worker(worker_id), self.keys.worker_index(), self.keys.lease_expiry(),
                self.keys.worker_slots(worker_id), self.keys.worker_leases(worker_id)]
        args = [self.clock.now_ms(), ttl_ms, worker_id, self.keys.lease_key_prefixes()["record"],
                self.keys.job("x")[:-1], resident, *job_fields]
        reply = await self.scripts.worker_heartbeat(keys=keys, args=args)
        if not reply[0]:
            return None
        width = 1 + len(job_fields)
        return [(reply[i].decode(), reply[i + 1:i + width]) for i in range(1, len(reply), width)]

    async def release(self, lease_id: str, *, only_if_expired: bool = False) -> Lease | None:
        """Free the lease's slots; the released lease, or None when it was gone (or, with
        only_if_expired, still valid)."""
        lease = await self.get(lease_id)
        if lease is None:
            return None
        keys = [self.keys.lease(lease_id), self.keys.job_leases(lease.job_id), self.keys.lease_expiry()]
        cutoff = self.clock.now_ms() if only_if_expired else ""
        released = await self.scripts.lease_release(
            keys=keys, args=[lease_id, cutoff, json.dumps(self.keys.lease_key_prefixes())])
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
        """The leases of `ids` (one pipelined round trip), by lease id."""
        ordered = sorted(ids)
        async with self.client.pipeline(transaction=False) as pipe:
            for lease_id in ordered:
                pipe.hgetall(self.keys.lease(lease_id.decode()))
            records = await pipe.execute()
        return [decode_lease(raw) for raw in records if raw]

    async def busy_slots(self, worker_id: str) -> set[str]:
        """The worker's slots held by an unexpired lease right now."""
        return held_slots(await self.client.hgetall(self.keys.worker_slots(worker_id)), self.clock.now_ms())

    async def is_current(self, context: LeaseContext) -> bool:
        """The lease exists, belongs to the job, carries this fencing token and has not expired."""
        raw = await self.client.hgetall(self.keys.lease(context.lease_id))
        return (bool(raw) and raw.get(b"job_id", b"").decode() == context.job_id
                and number(raw, "fencing_token") == context.fencing_token
                and number(raw, "expire_at") > self.clock.now_ms())
