"""SubmitJob's checks of the asynchronous settings (spec.async) and of the importance mask band
of every agent's loss, over real gRPC against a real Redis: a bad spec is INVALID_ARGUMENT
naming the field at submit time, not a failure at the job's first step."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import grpc
import pytest

from opentinker_api.common.v1 import algorithm_pb2 as algo_pb
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from tests.scheduler._harness import rpc_error, scheduler_server
from tests.scheduler._spec_edits import edited, inference, sft, two_agents

SWAP = job_pb2.AsyncConfig.IN_FLIGHT_SWAP_WEIGHTS
TOKEN, SEQUENCE = algo_pb.IMPORTANCE_MASK_TOKEN, algo_pb.IMPORTANCE_MASK_SEQUENCE


def asynchronous(spec: job_pb2.JobSpec) -> job_pb2.AsyncConfig:
    return getattr(spec, "async")


def staleness(k: int) -> Callable[[job_pb2.JobSpec], object]:
    return lambda s: setattr(asynchronous(s), "max_staleness", k)


def policy_loss(**fields) -> Callable[[job_pb2.JobSpec], object]:
    return lambda s: [setattr(s.policy.algorithm.loss, name, value) for name, value in fields.items()]


def agent_loss(index: int, **fields) -> Callable[[job_pb2.JobSpec], object]:
    return lambda s: [setattr(s.agents[index].algorithm.loss, name, value) for name, value in fields.items()]


LOSS = "spec.policy.algorithm.loss"
BAD = {
    "staleness 9": (edited(staleness(9)), "spec.async.max_staleness: must be between 0 and 8"),
    "staleness -1": (edited(staleness(-1)), "spec.async.max_staleness: must not be negative"),
    "unknown in_flight": (edited(lambda s: setattr(asynchronous(s), "in_flight", 9)),
                          "spec.async.in_flight: 9 is not a known InFlight value"),
    "async SFT": (edited(sft, staleness(1)), "spec.async.max_staleness: only RL jobs"),
    "async INFERENCE": (edited(inference, staleness(2)), "spec.async.max_staleness: only RL jobs"),
    "mask on SFT's cross-entropy": (edited(sft, policy_loss(importance_mask=TOKEN)),
                                    f"{LOSS}.importance_mask: masks a policy-gradient loss"),
    "mask on cross-entropy": (edited(policy_loss(function=algo_pb.LOSS_FUNCTION_CROSS_ENTROPY,
                                                 importance_mask=SEQUENCE)),
                              f"{LOSS}.importance_mask: masks a policy-gradient loss"),
    "low above 1": (edited(policy_loss(importance_mask=TOKEN, importance_mask_low=1.5,
                                       importance_mask_high=3.0)),
                    f"{LOSS}.importance_mask_low: must be in (0, 1] (0 = 0.5), got 1.5"),
    "negative low": (edited(policy_loss(importance_mask=TOKEN, importance_mask_low=-0.5)),
                     f"{LOSS}.importance_mask_low: must not be negative"),
    "high below 1": (edited(policy_loss(importance_mask=SEQUENCE, importance_mask_high=0.9)),
                     f"{LOSS}.importance_mask_high: must be >= 1 (0 = 2.0), got 0.9"),
    "empty band": (edited(policy_loss(importance_mask=TOKEN, importance_mask_low=1.0,
                                      importance_mask_high=1.0)),
                   f"{LOSS}.importance_mask_high: must be > importance_mask_low (1)"),
    "infinite high": (edited(policy_loss(importance_mask=TOKEN, importance_mask_high=math.inf)),
                      f"{LOSS}.importance_mask_high: must be a finite number"),
    "unknown mask": (edited(policy_loss(importance_mask=5)),
                     f"{LOSS}.importance_mask: 5 is not a known ImportanceMask value"),
    "second agent's band": (edited(two_agents, agent_loss(1, importance_mask=TOKEN,
                                                          importance_mask_high=0.5)),
                            "spec.agents[1].algorithm.loss.importance_mask_high: must be >= 1"),
}


def submit_error(redis_url: str, spec: job_pb2.JobSpec) -> grpc.aio.AioRpcError:
    """How SubmitJob refuses `spec` (and that it stored nothing)."""
    async def scenario() -> grpc.aio.AioRpcError:
        async with scheduler_server(redis_url) as h:
            error = await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(request_id="bad", spec=spec)))
            assert (await h.stub.ListJobs(pb.ListJobsRequest())).jobs == []
            return error

    return asyncio.run(scenario())


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_async_or_importance_mask_setting_is_refused_naming_the_field(redis_url: str, case: str) -> None:
    spec, words = BAD[case]
    error = submit_error(redis_url, spec)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(words), error.details()


GOOD = {
    "k=1 swap weights": edited(staleness(1), lambda s: setattr(asynchronous(s), "in_flight", SWAP)),
    "k=8": edited(staleness(8)),
    "k=0 on SFT": edited(sft, staleness(0)),
    "default band, default RL loss": edited(policy_loss(importance_mask=TOKEN)),
    "edge band [1, 1.5] on GSPO": edited(policy_loss(function=algo_pb.LOSS_FUNCTION_GSPO, clip_low=0.2,
                                                     clip_high=0.2, importance_mask=SEQUENCE,
                                                     importance_mask_low=1.0, importance_mask_high=1.5)),
    "band set with the mask off": edited(policy_loss(importance_mask_low=3.0)),
    "two agents, one masked": edited(two_agents, staleness(2), agent_loss(0, importance_mask=TOKEN,
                                                                          importance_mask_low=0.8)),
}


def test_good_async_and_importance_mask_settings_are_stored_as_sent(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            for index, (name, spec) in enumerate(GOOD.items()):
                response = await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=f"good-{index}", spec=spec))
                assert response.created and response.job.spec == spec, name

    asyncio.run(scenario())
