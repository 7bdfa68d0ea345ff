"""Tenants in Redis: one hash per tenant (name, quota, creation time) and the set of all ids.

A tenant without a record (the built-in `default` tenant before an admin configures it) has no
quota. Usage counters live apart, in the `tenant-usage` hash the job scripts keep (see lua.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio

from opentinker_runtime.core.redis_store import Keys
from opentinker_scheduler.clock import Clock
from opentinker_scheduler.codec import QUOTA_FIELDS, decode_quota, decode_usage, number, text
from opentinker_scheduler.model import Quota, Tenant, Usage


def quota_fields(quota: Quota) -> dict[str, int]:
    return {name: getattr(quota, name) for name in QUOTA_FIELDS}


@dataclass(frozen=True, kw_only=True)
class TenantStore:
    client: redis.asyncio.Redis
    keys: Keys
    clock: Clock

    async def create(self, tenant: Tenant) -> bool:
        """Store a new tenant; False when the id is taken."""
        key = self.keys.tenant(tenant.tenant_id)
        fields = {"tenant_id": tenant.tenant_id, "display_name": tenant.display_name,
                  "create_time": self.clock.now_ms(), **quota_fields(tenant.quota)}
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, "tenant_id", tenant.tenant_id)
            pipe.hset(key, mapping=fields)
            pipe.sadd(self.keys.tenant_index(), tenant.tenant_id)
            created, *_ = await pipe.execute()
        return bool(created)

    async def exists(self, tenant_id: str) -> bool:
        return bool(await self.client.exists(self.keys.tenant(tenant_id)))

    async def get(self, tenant_id: str) -> Tenant | None:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.tenant(tenant_id)).hgetall(self.keys.tenant_usage())
            raw, usage = await pipe.execute()
        if not raw:
            return None
        return Tenant(tenant_id=tenant_id, display_name=text(raw, "display_name"),
                      quota=Quota(**{name: number(raw, name) for name in QUOTA_FIELDS}),
                      create_time_ms=number(raw, "create_time"),
                      usage=decode_usage(usage).get(tenant_id, Usage()))

    async def set_quota(self, tenant_id: str, quota: Quota) -> None:
        await self.client.hset(self.keys.tenant(tenant_id), mapping=quota_fields(quota))

    async def ids(self) -> list[str]:
        return sorted(i.decode() for i in await self.client.smembers(self.keys.tenant_index()))

    async def quotas(self, tenant_ids: Iterable[str]) -> dict[str, Quota]:
        """The quota of each tenant (no record: unlimited), in one round trip."""
        ids = list(tenant_ids)
        async with self.client.pipeline(transaction=False) as pipe:
            for tenant_id in ids:
                pipe.hmget(self.keys.tenant(tenant_id), QUOTA_FIELDS)
            rows = await pipe.execute()
        return {tenant_id: decode_quota(row) for tenant_id, row in zip(ids, rows, strict=True)}
