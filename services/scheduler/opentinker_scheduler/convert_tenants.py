"""Tenants, quotas, usage and API keys: protobuf <-> domain."""

from __future__ import annotations

from opentinker_api.scheduler.v1 import tenant_pb2
from opentinker_runtime.auth.api_keys import ApiKeyRecord, Principal
from opentinker_scheduler.convert_common import timestamp
from opentinker_scheduler.model import Caller, Quota, Tenant


def caller_from_principal(principal: Principal) -> Caller:
    return Caller(tenant_id=principal.tenant_id, admin=principal.admin)


def quota_from_proto(quota: tenant_pb2.Quota) -> Quota:
    return Quota(max_devices=quota.max_devices, max_concurrent_jobs=quota.max_concurrent_jobs,
                 max_queued_jobs=quota.max_queued_jobs)


def tenant_to_proto(tenant: Tenant) -> tenant_pb2.Tenant:
    quota, usage = tenant.quota, tenant.usage
    return tenant_pb2.Tenant(
        tenant_id=tenant.tenant_id, display_name=tenant.display_name,
        quota=tenant_pb2.Quota(max_devices=quota.max_devices, max_concurrent_jobs=quota.max_concurrent_jobs,
                               max_queued_jobs=quota.max_queued_jobs),
        create_time=timestamp(tenant.create_time_ms),
        usage=tenant_pb2.Usage(devices=usage.devices, running_jobs=usage.running_jobs,
                               queued_jobs=usage.queued_jobs))


def api_key_to_proto(record: ApiKeyRecord) -> tenant_pb2.ApiKey:
    return tenant_pb2.ApiKey(key_id=record.key_id, tenant_id=record.tenant_id, admin=record.admin,
                             description=record.description, create_time=timestamp(record.create_time_ms),
                             revoke_time=timestamp(record.revoke_time_ms))
