"""Tenants of the scheduler's auth tests: a channel and stub with a key, and a new tenant's first
API key."""

from __future__ import annotations

import grpc

from opentinker_api.scheduler.v1 import tenant_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.channels import authenticated_channel


def stub_for(address: str, key: str) -> tuple[grpc.aio.Channel, pb_grpc.SchedulerServiceStub]:
    channel = authenticated_channel(address, key)
    return channel, pb_grpc.SchedulerServiceStub(channel)


async def new_tenant(h, tenant_id: str, **quota: int) -> str:  # noqa: ANN001
    """Create a tenant with the admin key; its first API key (shown only here)."""
    response = await h.stub.CreateTenant(pb.CreateTenantRequest(
        tenant_id=tenant_id, display_name=tenant_id.title(), quota=tenant_pb2.Quota(**quota)))
    assert response.tenant.tenant_id == tenant_id and not response.api_key.admin
    assert response.api_key_secret.startswith(f"otk_{response.api_key.key_id}_")
    return response.api_key_secret
