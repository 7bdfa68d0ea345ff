"""No Rollout policy outlives its attempt: a job's newer attempt loading a policy unloads the ones
its earlier attempt loaded (their fencing tokens are lower), the Scheduler's word that a job moved
on or stopped unloads its policies, and a policy unused past the TTL is unloaded unless its
attempt is assigned here. Calls on an unloaded policy are NOT_FOUND saying why."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest

from opentinker_api.common.v1 import datum_pb2, model_pb2, resources_pb2, sampling_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.core.server import start_server, stop_server
from opentinker_runtime.workers.reaping import attempt_callbacks
from opentinker_runtime.workers.registration import WorkerRegistration
from opentinker_rollout.main import build_plan
from opentinker_rollout.policies import PolicyRegistry
from opentinker_rollout.servicer import RolloutServicer
from opentinker_rollout.settings import RolloutSettings
from tests.rollout._support import MODEL_NAME

Code = grpc.StatusCode


def lease(token: int, job: str = "job-1") -> resources_pb2.LeaseContext:
    return resources_pb2.LeaseContext(job_id=job, lease_id=f"lease-{token}", fencing_token=token)


@asynccontextmanager
async def rollout(tmp_path, **settings) -> AsyncIterator[tuple[pb_grpc.RolloutServiceStub, PolicyRegistry, RolloutSettings]]:
    """The Rollout built as main.py builds it (its Scheduler unreachable), on a free port."""
    settings = RolloutSettings(auth="disabled", port=0, checkpoint_dir=tmp_path, scheduler_address="127.0.0.1:1",
                               **settings)
    plan = await build_plan(settings)
    started = await start_server(settings, plan)
    servicer = plan.services[0].servicer
    assert isinstance(servicer, RolloutServicer)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{started.port}") as channel:
            yield pb_grpc.RolloutServiceStub(channel), servicer.rollout.registry, settings
    finally:
        await stop_server(started, grace_seconds=1)
        for hook in plan.close_hooks:
            await hook()


async def load(stub: pb_grpc.RolloutServiceStub, token: int, job: str = "job-1", lora: bool = False) -> str:
    adaptation = model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=4, alpha=8.0)) if lora else None
    request = pb.LoadModelRequest(lease=lease(token, job), adaptation=adaptation,
                                  model=model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=MODEL_NAME)))
    return (await stub.LoadModel(request)).policy.policy_id


def sample(policy_id: str) -> pb.SampleRequest:
    return pb.SampleRequest(policy_id=policy_id, prompts=[pb.Prompt(tokens=datum_pb2.TokenSequence(tokens=[1, 2, 3]))],
                            sampling=sampling_pb2.SamplingParams(max_new_tokens=2))


async def not_found(stub: pb_grpc.RolloutServiceStub, policy_id: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Sample(sample(policy_id))
    assert caught.value.code() == Code.NOT_FOUND
    return caught.value.details()


def test_a_new_attempts_load_unloads_the_policies_of_older_attempts(tmp_path) -> None:
    async def scenario() -> None:
        async with rollout(tmp_path) as (stub, registry, _):
            old_full, old_lora = await load(stub, token=1), await load(stub, token=1, lora=True)
            other_job = await load(stub, token=1, job="job-2")
            old_model = weakref.ref(registry.get(old_full).model)
            new = await load(stub, token=2)
            message = await not_found(stub, old_full)
            assert "newer attempt" in message and "fencing token 2" in message
            assert "newer attempt" in await not_found(stub, old_lora)
            gc.collect()
            assert old_model() is None, "the replaced policy's model is still referenced"
            assert set(registry._policies) == {new, other_job}
    asyncio.run(scenario())


def test_the_schedulers_word_unloads_replaced_and_stopped_jobs_policies(tmp_path) -> None:
    async def scenario() -> None:
        async with rollout(tmp_path) as (stub, registry, settings):
            agent = WorkerRegistration.for_settings(settings, role="rollout", **attempt_callbacks(registry)).agent
            stale, stopped = await load(stub, token=1), await load(stub, token=1, job="job-2")
            await agent.on_assignment(job_pb2.Assignment(lease=lease(2)))  # job-1 re-queued onto us
            assert "newer attempt" in await not_found(stub, stale)
            with pytest.raises(grpc.aio.AioRpcError) as caught:  # its old lease is stale now
                await load(stub, token=1)
            assert caught.value.code() == Code.FAILED_PRECONDITION
            await agent.on_stop("job-2")
            assert "no longer runs job 'job-2'" in await not_found(stub, stopped)
            assert registry._policies == {}
    asyncio.run(scenario())


def test_an_unused_policy_expires_unless_its_attempt_is_assigned_here(tmp_path) -> None:
    async def scenario() -> None:
        async with rollout(tmp_path, policy_idle_ttl_seconds=0.6) as (stub, registry, settings):
            agent = WorkerRegistration.for_settings(settings, role="rollout", **attempt_callbacks(registry)).agent
            await agent.on_assignment(job_pb2.Assignment(lease=lease(1, "job-leased")))
            leased = await load(stub, token=1, job="job-leased")
            idle, used = await load(stub, token=1), await load(stub, token=1, job="job-2")
            for _ in range(12):  # the reaper runs every TTL/4
                await stub.Sample(sample(used))
                await asyncio.sleep(0.1)
            assert "not used for 0.6 s" in await not_found(stub, idle)
            assert set(registry._policies) == {used, leased}
    asyncio.run(scenario())
