"""Fail closed: outside a call nobody acts with rights; with auth disabled the local admin is
said explicitly by an interceptor (issue 20, item 8)."""

from __future__ import annotations

import asyncio

import grpc

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.interceptor import NOBODY, current_principal
from tests.scheduler._harness import scheduler_server


def test_outside_a_call_the_principal_has_no_rights() -> None:
    assert current_principal() is NOBODY
    assert not NOBODY.admin and NOBODY.tenant_id == "" and NOBODY.job_id == ""

    async def in_a_task() -> None:  # a background task of a service, outside any call
        assert not current_principal().admin

    asyncio.run(in_a_task())


def test_with_auth_disabled_every_caller_is_the_local_admin(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:  # auth disabled
            async with grpc.aio.insecure_channel(h.address) as channel:  # no key at all
                stub = pb_grpc.SchedulerServiceStub(channel)
                created = await stub.CreateTenant(pb.CreateTenantRequest(tenant_id="local-made"))
                assert created.tenant.tenant_id == "local-made"  # an admin-only RPC
                jobs = await stub.ListJobs(pb.ListJobsRequest())
                assert list(jobs.jobs) == []

    asyncio.run(scenario())
