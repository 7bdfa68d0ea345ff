"""Who a Tinker request speaks for: its `X-API-Key` is one of our API keys.

The SDK insists keys start with `tml-`, so `tml-otk_...` is read as `otk_...`. A key is verified
against the stack's key store (Redis) and cached for a few seconds; with auth disabled every
caller is the local system tenant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from opentinker_runtime.auth.api_keys import SYSTEM_TENANT, Principal
from opentinker_gateway.errors import Unauthorized
from opentinker_gateway.service import Caller

TINKER_PREFIX = "tml-"
Verify = Callable[[str], Awaitable[Principal | None]]


def key_from_header(value: str | None) -> str:
    if not value:
        raise Unauthorized("missing X-API-Key: set TINKER_API_KEY=tml-<your OpenTinker key>")
    return value.strip().removeprefix(TINKER_PREFIX)


class TenantAuth:
    def __init__(self, verify: Verify | None) -> None:
        self.verify = verify

    async def caller(self, header: str | None) -> Caller:
        if self.verify is None:
            return Caller(tenant_id=SYSTEM_TENANT, key="")
        key = key_from_header(header)
        principal = await self.verify(key)
        if principal is None:
            raise Unauthorized("X-API-Key is not a valid OpenTinker API key (TINKER_API_KEY=tml-otk_...)")
        return Caller(tenant_id=principal.tenant_id, key=key)
