"""Workers report the base models they hold (Heartbeat.resident_models): ListWorkers shows which
jobs share a base, and a LoRA job is placed where its base is resident (real Scheduler, real
Redis). A tenant's own EnvHost cannot steer placement with such a report."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import worker_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.auth.api_keys import new_api_key
from tests.scheduler._harness import register_request, rl_spec, rpc_error, running_job, scheduler_server
from tests.scheduler._tenants import new_tenant, stub_for

pytestmark = pytest.mark.timeout(60)
TINY = "builtin:tiny-llama@1/default"  # rl_spec's model: tiny-llama, seed 1
ADMIN_KEY = new_api_key()


def shared_worker(worker_id: str, role: str) -> pb.RegisterWorkerRequest:
    request = register_request(worker_id, role, 1)
    request.devices[0].shares = 4
    return request


def resident(model_key: str, *job_ids: str, device_id: str = "cpu:0") -> worker_pb2.ResidentModel:
    return worker_pb2.ResidentModel(device_id=device_id, model_key=model_key, job_ids=list(job_ids))


def test_a_lora_job_goes_to_the_trainer_that_holds_its_base_and_listings_show_who_shares_it(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            for worker_id, role in (("trainer-a", "trainer"), ("trainer-b", "trainer"), ("rollout-1", "rollout")):
                await h.stub.RegisterWorker(shared_worker(worker_id, role))
            await h.stub.RegisterWorker(register_request("coord-1", "coordinator", 0))
            # trainer-a would win the tie (worker id order); trainer-b holds the job's base
            await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="trainer-a", resident_models=[
                resident("builtin:small-llama@0/default", "job-other")]))
            await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="trainer-b", resident_models=[
                resident(TINY, "job-1", "job-2")]))
            job = await running_job(h, spec=rl_spec())
            trainer = next(a for a in job.assignments if a.role == resources_pb2.ROLE_TRAINER)
            assert trainer.worker_id == "trainer-b" and list(trainer.device_ids) == ["cpu:0"]
            listed = {w.worker_id: w for w in (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers}
            assert [(m.device_id, m.model_key, list(m.job_ids)) for m in listed["trainer-b"].resident_models] == [
                ("cpu:0", TINY, ["job-1", "job-2"])]
            # each heartbeat replaces the last one's report; an empty one says nothing is held
            await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="trainer-b"))
            listed = {w.worker_id: w for w in (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers}
            assert list(listed["trainer-b"].resident_models) == []

    asyncio.run(scenario())


def test_a_bad_report_is_refused_with_the_field_named(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await h.stub.RegisterWorker(shared_worker("trainer-a", "trainer"))
            cases = {"resident_models": [resident(TINY, device_id=f"cpu:{i}") for i in range(65)],
                     "resident_models[0].model_key": [resident("")],
                     "resident_models[0].job_ids": [resident(TINY, "job with spaces")]}
            for field, models in cases.items():
                error = await rpc_error(h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="trainer-a",
                                                                             resident_models=models)))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and field in error.details(), field
            alive = await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="trainer-a"))  # and it still serves
            assert list(alive.assignments) == []

    asyncio.run(scenario())


def test_a_tenants_envhost_cannot_report_resident_models(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            channel, acme = stub_for(h.address, await new_tenant(h, "acme"))
            async with channel:
                request = register_request("acme-games@laptop", "envhost", devices=0, address="127.0.0.1:7001")
                await acme.RegisterWorker(request)
                await acme.Heartbeat(pb.HeartbeatRequest(worker_id="acme-games@laptop",
                                                         resident_models=[resident(TINY, "job-1")]))
                workers = (await acme.ListWorkers(pb.ListWorkersRequest())).workers
            assert [list(w.resident_models) for w in workers] == [[]]

    asyncio.run(scenario())
