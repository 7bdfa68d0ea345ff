"""The worker pool in Redis: one hash per worker; `expire_at` (last heartbeat + TTL) is liveness.

A worker is ALIVE while `expire_at` lies ahead, DEAD after it. A dead worker cannot heartbeat
back to life (it must register again) and is forgotten after the retention time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import redis.asyncio

from opentinker_runtime.core.redis_store import Keys
from opentinker_scheduler.clock import Clock
from opentinker_scheduler.codec import decode_worker, encode_devices
from opentinker_scheduler.lua import Scripts
from opentinker_scheduler.model import Worker, WorkerRegistration


@dataclass(frozen=True, kw_only=True)
class WorkerRegistry:
    client: redis.asyncio.Redis
    keys: Keys
    scripts: Scripts
    clock: Clock

    async def put(self, registration: WorkerRegistration, *, ttl_ms: int) -> Worker:
        """Store (or replace) a registration, alive until now + ttl."""
        now = self.clock.now_ms()
        fields = {"worker_id": registration.worker_id, "role": registration.role,
                  "address": registration.address, "devices": encode_devices(registration.devices),
                  "labels": json.dumps(registration.labels), "version": registration.version,
                  "name": registration.name, "tenant_id": registration.tenant_id,
                  "register_time": now, "last_heartbeat": now, "expire_at": now + ttl_ms,
                  "ttl_ms": ttl_ms, "draining": "0"}
        key = self.keys.worker(registration.worker_id)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(key).hset(key, mapping=fields)
            pipe.zadd(self.keys.worker_index(), {registration.worker_id: now + ttl_ms})
            await pipe.execute()
        return decode_worker(await self.client.hgetall(key), now_ms=now)

    async def get(self, worker_id: str) -> Worker | None:
        raw = await self.client.hgetall(self.keys.worker(worker_id))
        return decode_worker(raw, now_ms=self.clock.now_ms()) if raw else None

    async def all(self) -> list[Worker]:
        """Every known worker (alive, draining or recently dead), by worker id (two round trips)."""
        ids = sorted(i.decode() for i in await self.client.zrange(self.keys.worker_index(), 0, -1))
        async with self.client.pipeline(transaction=False) as pipe:
            for worker_id in ids:
                pipe.hgetall(self.keys.worker(worker_id))
            raws = await pipe.execute() if ids else []
        now = self.clock.now_ms()
        return [decode_worker(raw, now_ms=now) for raw in raws if raw]

    async def set_draining(self, worker_id: str) -> None:
        await self.client.hset(self.keys.worker(worker_id), "draining", "1")

    async def remove(self, worker_id: str) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.worker(worker_id)).zrem(self.keys.worker_index(), worker_id)
            await pipe.execute()

    async def dead_before(self, cutoff_ms: int) -> list[str]:
        """Ids of workers whose liveness ended before `cutoff_ms`."""
        ids = await self.client.zrangebyscore(self.keys.worker_index(), "-inf", cutoff_ms)
        return [worker_id.decode() for worker_id in ids]
