"""Tenant and API-key use cases: admins create tenants, set quotas, mint and revoke keys;
a tenant key may read its own tenant and list its own keys. Across tenants: NOT_FOUND."""

from __future__ import annotations

import re
from dataclasses import dataclass

from opentinker_runtime.auth.api_keys import SYSTEM_TENANT, ApiKeyRecord, ApiKeyStore
from opentinker_scheduler.errors import FailedPrecondition, InvalidArgument, NotFound
from opentinker_scheduler.model import Caller, Page, Quota, Tenant
from opentinker_scheduler.paging import decode_token, encode_token, page_size
from opentinker_scheduler.tenants import QUOTA_FIELDS, TenantStore

TENANT_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
MAX_QUOTA = 1_000_000
MAX_TEXT = 256


def check_tenant_id(tenant_id: str, field: str = "tenant_id") -> None:
    if not TENANT_ID.match(tenant_id):
        raise InvalidArgument(field, "must be 1-63 lowercase letters, digits or '-', starting with a "
                              f"letter or digit, got {tenant_id!r}")


def check_quota(quota: Quota, field: str = "quota") -> None:
    for name in QUOTA_FIELDS:
        value = getattr(quota, name)
        if not 0 <= value <= MAX_QUOTA:
            raise InvalidArgument(f"{field}.{name}", f"must be between 0 (unlimited) and {MAX_QUOTA}, got {value}")


def check_text(value: str, field: str) -> None:
    if len(value) > MAX_TEXT:
        raise InvalidArgument(field, f"must be at most {MAX_TEXT} characters")


@dataclass(frozen=True, kw_only=True)
class TenantAdmin:
    tenants: TenantStore
    api_keys: ApiKeyStore

    async def create_tenant(self, caller: Caller, *, tenant_id: str, display_name: str,
                            quota: Quota) -> tuple[Tenant, ApiKeyRecord, str]:
        """A new tenant with a first (non-admin) key: (tenant, key record, key text shown once)."""
        caller.require_admin("CreateTenant")
        check_tenant_id(tenant_id)
        check_text(display_name, "display_name")
        check_quota(quota)
        if tenant_id == SYSTEM_TENANT:
            raise InvalidArgument("tenant_id", f"{SYSTEM_TENANT!r} is reserved for OpenTinker's own service key")
        if not await self.tenants.create(Tenant(tenant_id=tenant_id, display_name=display_name, quota=quota)):
            raise FailedPrecondition(f"tenant {tenant_id} already exists", reason="")
        record, text = await self.api_keys.create(tenant_id=tenant_id, admin=False,
                                                  description="created with the tenant")
        return await self.get_tenant(caller, tenant_id), record, text

    async def get_tenant(self, caller: Caller, tenant_id: str) -> Tenant:
        check_tenant_id(tenant_id)
        tenant = await self.tenants.get(tenant_id) if caller.admin or caller.tenant_id == tenant_id else None
        if tenant is None:
            raise NotFound(f"tenant {tenant_id} not found", reason="")
        return tenant

    async def list_tenants(self, caller: Caller, *, size: int, token: str) -> Page[Tenant]:
        caller.require_admin("ListTenants")
        limit = page_size(size)
        after = decode_token("tenants", token) or ""
        ids = [t for t in await self.tenants.ids() if t > after]
        page = [await self.get_tenant(caller, t) for t in ids[:limit]]
        next_token = encode_token("tenants", page[-1].tenant_id) if len(ids) > limit else ""
        return Page(items=page, next_page_token=next_token)

    async def update_quota(self, caller: Caller, tenant_id: str, quota: Quota) -> Tenant:
        """New limits apply to later submissions and allocations; running jobs keep running."""
        caller.require_admin("UpdateTenantQuota")
        await self.get_tenant(caller, tenant_id)
        check_quota(quota)
        await self.tenants.set_quota(tenant_id, quota)
        return await self.get_tenant(caller, tenant_id)

    async def create_api_key(self, caller: Caller, *, tenant_id: str, admin: bool,
                             description: str) -> tuple[ApiKeyRecord, str]:
        caller.require_admin("CreateApiKey")
        check_text(description, "description")
        if tenant_id != SYSTEM_TENANT:
            await self.get_tenant(caller, tenant_id)
        return await self.api_keys.create(tenant_id=tenant_id, admin=admin, description=description)

    async def list_api_keys(self, caller: Caller, tenant_id: str, *, size: int,
                            token: str) -> Page[ApiKeyRecord]:
        """Public parts only; a tenant key lists its own tenant's keys."""
        tenant_id = tenant_id or caller.tenant_id
        check_tenant_id(tenant_id)
        if not (caller.admin or caller.tenant_id == tenant_id):
            raise NotFound(f"tenant {tenant_id} not found", reason="")
        limit = page_size(size)
        after = decode_token("api_keys", token) or ""
        records = [r for r in await self.api_keys.of_tenant(tenant_id) if r.key_id > after]
        next_token = encode_token("api_keys", records[limit - 1].key_id) if len(records) > limit else ""
        return Page(items=records[:limit], next_page_token=next_token)

    async def revoke_api_key(self, caller: Caller, key_id: str) -> ApiKeyRecord:
        caller.require_admin("RevokeApiKey")
        if not re.fullmatch(r"[0-9a-f]{16}", key_id):
            raise InvalidArgument("key_id", "must be the 16 hex digits after 'otk_' in the key")
        record = await self.api_keys.revoke(key_id)
        if record is None:
            raise NotFound(f"API key {key_id} not found", reason="")
        return record
