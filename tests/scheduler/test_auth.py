"""Tenants, API keys and the auth interceptor, on a real server, real Redis, real metadata.

The harness installs an admin (service) key and its stub sends it; tenants get their own keys
through CreateTenant, exactly as a client would.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from opentinker_api.scheduler.v1 import job_pb2, tenant_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.auth.api_keys import new_api_key, parse_api_key
from opentinker_runtime.core.redis_store import connect
from tests.scheduler._harness import register_request, rl_spec, rpc_error, scheduler_server
from tests.scheduler._tenants import new_tenant, stub_for

ADMIN_KEY = new_api_key()


def test_calls_without_a_valid_key_are_unauthenticated_and_health_stays_open(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            for key, detail in (("", "missing API key"), ("otk_nothex_123", "invalid API key"),
                                (new_api_key(), "invalid API key"),  # well-formed, never issued
                                (ADMIN_KEY[:-1] + ("A" if ADMIN_KEY[-1] != "A" else "B"), "invalid API key")):
                channel, stub = stub_for(h.address, key)
                async with channel:
                    error = await rpc_error(stub.SubmitJob(pb.SubmitJobRequest(spec=rl_spec())))
                    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
                    assert error.details().startswith(detail)
                    watch = await rpc_error(_first(stub.WatchJob(pb.WatchJobRequest(job_id="job-x"))))
                    assert watch.code() == grpc.StatusCode.UNAUTHENTICATED
                    health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
                    assert health.status == health_pb2.HealthCheckResponse.SERVING

    asyncio.run(scenario())


def test_a_tenant_sees_and_cancels_only_its_own_jobs(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            acme_channel, acme = stub_for(h.address, await new_tenant(h, "acme"))
            globex_channel, globex = stub_for(h.address, await new_tenant(h, "globex"))
            async with acme_channel, globex_channel:
                job = (await acme.SubmitJob(pb.SubmitJobRequest(request_id="r1", spec=rl_spec()))).job
                assert job.tenant_id == "acme"
                for call in (globex.GetJob(pb.GetJobRequest(job_id=job.job_id)),
                             globex.CancelJob(pb.CancelJobRequest(job_id=job.job_id)),
                             _first(globex.WatchJob(pb.WatchJobRequest(job_id=job.job_id)))):
                    error = await rpc_error(call)
                    assert error.code() == grpc.StatusCode.NOT_FOUND
                    assert error.details() == f"job {job.job_id} not found"  # no hint it exists
                same_request = (await globex.SubmitJob(pb.SubmitJobRequest(request_id="r1", spec=rl_spec()))).job
                assert same_request.job_id != job.job_id  # request ids are per tenant
                assert [j.job_id for j in (await acme.ListJobs(pb.ListJobsRequest())).jobs] == [job.job_id]
                assert [j.job_id for j in (await globex.ListJobs(pb.ListJobsRequest())).jobs] == [same_request.job_id]
                admin_view = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
                assert admin_view.tenant_id == "acme"  # the Coordinator's service key sees every job
                cancelled = (await acme.CancelJob(pb.CancelJobRequest(job_id=job.job_id))).job
                assert cancelled.state == job_pb2.Job.STATE_CANCELLED

    asyncio.run(scenario())


def test_tenant_keys_cannot_act_as_workers_or_admins(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            channel, acme = stub_for(h.address, await new_tenant(h, "acme", max_queued_jobs=5))
            async with channel:
                worker = await rpc_error(acme.RegisterWorker(register_request("w", "trainer")))
                assert worker.code() == grpc.StatusCode.PERMISSION_DENIED
                assert "need an admin key" in worker.details()
                assert (await rpc_error(acme.Heartbeat(pb.HeartbeatRequest(worker_id="w")))).code() == \
                    grpc.StatusCode.NOT_FOUND
                assert list((await acme.ListWorkers(pb.ListWorkersRequest())).workers) == []  # only its own
                denied = [acme.CreateTenant(pb.CreateTenantRequest(tenant_id="mine")),
                          acme.ListTenants(pb.ListTenantsRequest()),
                          acme.UpdateTenantQuota(pb.UpdateTenantQuotaRequest(tenant_id="acme")),
                          acme.CreateApiKey(pb.CreateApiKeyRequest(tenant_id="acme", admin=True))]
                for call in denied:
                    error = await rpc_error(call)
                    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
                    assert "needs an admin key" in error.details()
                own = (await acme.GetTenant(pb.GetTenantRequest(tenant_id="acme"))).tenant
                assert own.quota.max_queued_jobs == 5
                other = await rpc_error(acme.GetTenant(pb.GetTenantRequest(tenant_id="globex")))
                assert other.code() == grpc.StatusCode.NOT_FOUND

    asyncio.run(scenario())


def test_keys_are_shown_once_stored_hashed_and_revocable(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            first = await new_tenant(h, "acme")
            second = await h.stub.CreateApiKey(pb.CreateApiKeyRequest(tenant_id="acme", description="ci"))
            listed = (await h.stub.ListApiKeys(pb.ListApiKeysRequest(tenant_id="acme"))).api_keys
            assert sorted(k.key_id for k in listed) == sorted([first.split("_")[1], second.api_key.key_id])
            assert all(not k.admin and not k.HasField("revoke_time") for k in listed)
            async with connect(redis_url) as client:  # nothing in Redis holds a secret in clear
                for key in await client.keys("*"):
                    if await client.type(key) == b"hash":
                        stored = b" ".join(v for v in (await client.hgetall(key)).values())
                        for secret in (first, second.secret):
                            assert parse_api_key(secret)[1].encode() not in stored

            channel, acme = stub_for(h.address, second.secret)
            async with channel:
                own = (await acme.ListApiKeys(pb.ListApiKeysRequest())).api_keys
                assert len(own) == 2  # a tenant lists its own keys (public parts only)
                revoked = (await h.stub.RevokeApiKey(pb.RevokeApiKeyRequest(key_id=second.api_key.key_id))).api_key
                assert revoked.HasField("revoke_time")
                await asyncio.sleep(0.3)  # the harness trusts a verified key for 0.2 s
                error = await rpc_error(acme.ListJobs(pb.ListJobsRequest()))
                assert error.code() == grpc.StatusCode.UNAUTHENTICATED
            missing = await rpc_error(h.stub.RevokeApiKey(pb.RevokeApiKeyRequest(key_id="0123456789abcdef")))
            assert missing.code() == grpc.StatusCode.NOT_FOUND

    asyncio.run(scenario())


def test_quotas_are_managed_by_admins_and_enforced_on_submit(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            channel, acme = stub_for(h.address, await new_tenant(h, "acme"))
            async with channel:
                await acme.SubmitJob(pb.SubmitJobRequest(spec=rl_spec()))
                updated = (await h.stub.UpdateTenantQuota(pb.UpdateTenantQuotaRequest(
                    tenant_id="acme", quota=tenant_pb2.Quota(max_queued_jobs=1)))).tenant
                assert updated.quota.max_queued_jobs == 1 and updated.usage.queued_jobs == 1
                error = await rpc_error(acme.SubmitJob(pb.SubmitJobRequest(spec=rl_spec())))
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            bad = await rpc_error(h.stub.UpdateTenantQuota(pb.UpdateTenantQuotaRequest(
                tenant_id="acme", quota=tenant_pb2.Quota(max_devices=-1))))
            assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert bad.details().startswith("quota.max_devices: must be between 0")
            for tenant_id, field in (("Bad Name", "tenant_id"), ("system", "tenant_id")):
                error = await rpc_error(h.stub.CreateTenant(pb.CreateTenantRequest(tenant_id=tenant_id)))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and error.details().startswith(field)
            twice = await rpc_error(h.stub.CreateTenant(pb.CreateTenantRequest(tenant_id="acme")))
            assert twice.code() == grpc.StatusCode.FAILED_PRECONDITION
            tenants = (await h.stub.ListTenants(pb.ListTenantsRequest())).tenants
            assert [t.tenant_id for t in tenants] == ["acme"]

    asyncio.run(scenario())


def test_keys_never_reach_the_logs(redis_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> str:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            secret = await new_tenant(h, "acme")
            channel, acme = stub_for(h.address, secret)
            async with channel:
                await acme.SubmitJob(pb.SubmitJobRequest(spec=rl_spec()))
                await rpc_error(acme.RegisterWorker(register_request("w", "trainer")))
            channel, wrong = stub_for(h.address, secret[:-2] + "xx")
            async with channel:
                await rpc_error(wrong.ListJobs(pb.ListJobsRequest()))
            return secret

    secret = asyncio.run(scenario())
    captured = capfd.readouterr()
    output = captured.out + captured.err
    assert "call_refused" in output  # the refusal was logged ...
    assert secret not in output and ADMIN_KEY not in output  # ... without the key
    assert parse_api_key(secret)[1] not in output


async def _first(stream):  # noqa: ANN001, ANN202
    async for item in stream:
        return item
    return None
