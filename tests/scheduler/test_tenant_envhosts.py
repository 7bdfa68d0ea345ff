"""EnvHosts a tenant serves itself, and which EnvHost a tenant's job may name (real Scheduler,
real Redis, real keys).

A tenant key registers EnvHosts only, and they are its own: another tenant cannot see, renew,
remove or take over their worker ids, nor name them in a job (the refusal reads as for a name
nobody registered). A raw `envhost_address`, in any EnvironmentReference of a spec, is for admin
keys only: the services call whatever it names. CheckJobToken answers a tenant for its own jobs.
"""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest

from opentinker_api.common.v1 import environment_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.auth.api_keys import new_api_key
from tests.scheduler._harness import FAST, reason_of, register_pool, register_request, rl_spec, rpc_error, scheduler_server
from tests.scheduler._tenants import new_tenant, stub_for

ADMIN_KEY = new_api_key()
pytestmark = pytest.mark.timeout(60)


def envhost_request(worker_id: str, name: str = "", address: str = "127.0.0.1:7001") -> pb.RegisterWorkerRequest:
    request = register_request(worker_id, "envhost", devices=0, address=address)
    request.name = name
    return request


def spec_on(envhost: str = "", address: str = "", eval_address: str = "") -> job_pb2.JobSpec:
    spec = rl_spec()
    spec.environment.CopyFrom(environment_pb2.EnvironmentReference(env_name="math", envhost=envhost,
                                                                   envhost_address=address))
    if eval_address:
        spec.multi_agent.eval_environment.CopyFrom(environment_pb2.EnvironmentReference(
            env_name="gomoku", envhost_address=eval_address))
    return spec


def test_a_tenant_registers_envhosts_of_its_own_and_nothing_else(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            await h.stub.RegisterWorker(envhost_request("envhost@stack", "stack-games", "127.0.0.1:7000"))
            a_channel, acme = stub_for(h.address, await new_tenant(h, "acme"))
            b_channel, globex = stub_for(h.address, await new_tenant(h, "globex"))
            async with a_channel, b_channel:
                own = (await acme.RegisterWorker(envhost_request("acme-games@laptop", "games"))).worker
                assert own.tenant_id == "acme" and own.name == "games"
                for role in ("trainer", "rollout", "coordinator"):
                    denied = await rpc_error(acme.RegisterWorker(register_request(f"acme-{role}", role, 0)))
                    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED, role
                offering_devices = envhost_request("acme-2")
                offering_devices.devices.extend(register_request("x", "trainer", devices=1).devices)
                with_devices = await rpc_error(acme.RegisterWorker(offering_devices))
                assert with_devices.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert [w.worker_id for w in (await acme.ListWorkers(pb.ListWorkersRequest())).workers] == \
                    ["acme-games@laptop"]
                assert list((await globex.ListWorkers(pb.ListWorkersRequest())).workers) == []
                assert {w.worker_id for w in (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers} == \
                    {"acme-games@laptop", "envhost@stack"}
                await acme.Heartbeat(pb.HeartbeatRequest(worker_id="acme-games@laptop"))
                for call in (globex.Heartbeat(pb.HeartbeatRequest(worker_id="acme-games@laptop")),
                             globex.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="acme-games@laptop")),
                             acme.Heartbeat(pb.HeartbeatRequest(worker_id="envhost@stack"))):
                    assert (await rpc_error(call)).code() == grpc.StatusCode.NOT_FOUND
                for taken in ("acme-games@laptop", "envhost@stack"):  # another tenant's, the stack's
                    error = await rpc_error(globex.RegisterWorker(envhost_request(taken, "mine")))
                    assert error.code() == grpc.StatusCode.PERMISSION_DENIED and "someone else" in error.details()
                stack = (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers
                assert {w.worker_id: w.tenant_id for w in stack} == {"acme-games@laptop": "acme", "envhost@stack": ""}
                await acme.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="acme-games@laptop"))

    asyncio.run(scenario())


def test_a_tenant_holds_at_most_its_cap_of_envhosts(redis_url: str) -> None:
    async def scenario() -> None:
        config = dataclasses.replace(FAST, max_envhosts_per_tenant=2)
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY, config=config) as h:
            channel, acme = stub_for(h.address, await new_tenant(h, "acme"))
            async with channel:
                for index in range(2):
                    await acme.RegisterWorker(envhost_request(f"acme-{index}", address=f"127.0.0.1:{7100 + index}"))
                await acme.RegisterWorker(envhost_request("acme-1", address="127.0.0.1:7101"))  # again: same slot
                error = await rpc_error(acme.RegisterWorker(envhost_request("acme-2")))
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "at most 2" in error.details()

    asyncio.run(scenario())


def test_only_admin_keys_name_raw_envhost_addresses_in_any_environment_of_a_spec(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            channel, acme = stub_for(h.address, await new_tenant(h, "acme"))
            async with channel:
                for spec, field in ((spec_on(address="attacker.example:50054"), "spec.environment.envhost_address"),
                                    (spec_on(eval_address="127.0.0.1:1"),
                                     "spec.multi_agent.eval_environment.envhost_address")):
                    for validate_only in (True, False):
                        error = await rpc_error(acme.SubmitJob(pb.SubmitJobRequest(spec=spec,
                                                                                   validate_only=validate_only)))
                        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
                        assert error.details().startswith(field) and "admin keys only" in error.details()
                        assert reason_of(error) == "ERROR_REASON_ADMIN_ONLY_FIELD"
                assert (await acme.ListJobs(pb.ListJobsRequest())).jobs == []
                admin_job = await h.stub.SubmitJob(pb.SubmitJobRequest(spec=spec_on(address="127.0.0.1:50054")))
                assert admin_job.job.state == job_pb2.Job.STATE_QUEUED

    asyncio.run(scenario())


def test_a_job_names_its_tenants_own_or_the_stacks_envhosts_only(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            await h.stub.RegisterWorker(envhost_request("envhost@stack", "shared-games", "127.0.0.1:7000"))
            a_channel, acme = stub_for(h.address, await new_tenant(h, "acme"))
            b_channel, globex = stub_for(h.address, await new_tenant(h, "globex"))
            async with a_channel, b_channel:
                await acme.RegisterWorker(envhost_request("acme-games@laptop", "acme-games"))
                for reference in ("acme-games", "acme-games@laptop", "shared-games", "envhost@stack"):
                    job = (await acme.SubmitJob(pb.SubmitJobRequest(spec=spec_on(envhost=reference)))).job
                    assert job.tenant_id == "acme", reference
                refusals = [await rpc_error(globex.SubmitJob(pb.SubmitJobRequest(spec=spec_on(envhost=reference))))
                            for reference in ("acme-games", "acme-games@laptop", "nobody-registered-this")]
                assert {e.code() for e in refusals} == {grpc.StatusCode.INVALID_ARGUMENT}
                texts = {e.details().replace(repr(r), "NAME") for e, r in
                         zip(refusals, ("acme-games", "acme-games@laptop", "nobody-registered-this"))}
                assert len(texts) == 1, texts  # another tenant's EnvHost reads as one nobody registered
                assert texts.pop().startswith("spec.environment.envhost: no EnvHost NAME is registered")
                assert {reason_of(e) for e in refusals} == {"ERROR_REASON_ENVHOST_NOT_FOUND"}
                shared = await globex.SubmitJob(pb.SubmitJobRequest(spec=spec_on(envhost="shared-games")))
                assert shared.job.tenant_id == "globex"

    asyncio.run(scenario())


def test_check_job_token_answers_a_tenant_for_its_own_running_jobs_only(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            await register_pool(h)
            a_channel, acme = stub_for(h.address, await new_tenant(h, "acme", max_devices=4))
            b_channel, globex = stub_for(h.address, await new_tenant(h, "globex"))
            async with a_channel, b_channel:
                job = (await acme.SubmitJob(pb.SubmitJobRequest(spec=rl_spec()))).job
                await h.scheduler.allocator.tick()
                running = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
                token = next(a.job_token for a in running.assignments if a.job_token)
                answer = await acme.CheckJobToken(pb.CheckJobTokenRequest(job_id=job.job_id, job_token=token))
                assert answer.tenant_id == "acme"
                wrong = await rpc_error(acme.CheckJobToken(pb.CheckJobTokenRequest(job_id=job.job_id,
                                                                                   job_token=token[:-1] + "x")))
                assert wrong.code() == grpc.StatusCode.PERMISSION_DENIED
                assert reason_of(wrong) == "ERROR_REASON_JOB_TOKEN_INVALID"
                other = await rpc_error(globex.CheckJobToken(pb.CheckJobTokenRequest(job_id=job.job_id,
                                                                                     job_token=token)))
                assert other.code() == grpc.StatusCode.NOT_FOUND
                await acme.CancelJob(pb.CancelJobRequest(job_id=job.job_id))
                await h.scheduler.allocator.tick()

    asyncio.run(scenario())
