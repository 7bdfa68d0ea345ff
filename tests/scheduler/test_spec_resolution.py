"""SubmitJob resolves each spec with the one resolver (opentinker_runtime.jobplan): a spec that does
not resolve is INVALID_ARGUMENT naming the field the resolver names, and a stored job's priority,
devices and retries are the plan's, defaults included. Real gRPC against a real Redis."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.jobplan import ResolveError, defaults, resolve_job_plan
from tests.jobplan.specs import least_spec
from tests.scheduler._harness import reason_of, rpc_error, scheduler_server

UNRESOLVABLE = [
    least_spec("RL", **{"policy.algorithm.optimizer.learning_rate": 0.0}),
    least_spec("MULTI_AGENT", **{"policy.adaptation.lora.dropout": 1.0}),
    least_spec("INFERENCE", **{"inference.num_episodes": -3}),
    least_spec("SESSION", **{"training.batch_size": 4}),
    least_spec("RL", **{"policy.model.builtin.name": ""}),
]


def resolve_error(spec: job_pb2.JobSpec) -> ResolveError:
    with pytest.raises(ResolveError) as raised:
        resolve_job_plan(spec)
    return raised.value


@pytest.mark.parametrize("spec", UNRESOLVABLE, ids=[resolve_error(spec).field for spec in UNRESOLVABLE])
def test_a_spec_that_does_not_resolve_is_invalid_argument_naming_the_resolvers_field(redis_url: str,
                                                                                     spec: job_pb2.JobSpec) -> None:
    expected = resolve_error(spec)

    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            for validate_only in (True, False):
                error = await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(spec=spec, validate_only=validate_only)))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert error.details() == f"{expected.field}: {expected.message}"
                assert reason_of(error) == "ERROR_REASON_INVALID_FIELD"
            assert (await h.stub.ListJobs(pb.ListJobsRequest())).jobs == []

    asyncio.run(scenario())


def test_a_stored_jobs_retries_are_the_plans_default_for_its_type(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            for kind in ("RL", "SFT", "INFERENCE", "SESSION"):
                spec = least_spec(kind)
                job = (await h.stub.SubmitJob(pb.SubmitJobRequest(spec=spec, request_id=kind))).job
                assert job.spec == spec and job.retries_left == resolve_job_plan(spec).training.max_retries, kind
                assert job.retries_left == (0 if kind == "SESSION" else defaults.MAX_RETRIES), kind

    asyncio.run(scenario())
