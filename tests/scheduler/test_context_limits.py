"""SubmitJob refuses token limits that cannot fit the model's context window, where the Scheduler
knows the window: a builtin model's (its config) and a checkpoint's (its base's, through the job
that saved it). A user's own model directory is never refused (its window is unknown here).
Real gRPC against a real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import pytest

from opentinker_api.common.v1 import model_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_scheduler.model_context import BUILTIN_CONTEXT_TOKENS
from tests.scheduler._harness import lease_of, register_pool, rl_spec, rpc_error, scheduler_server
from tests.scheduler._spec_edits import edited, inference, sft, two_agents

Edit = Callable[[job_pb2.JobSpec], object]


def sampling(max_new_tokens: int, agent: str = "policy") -> Edit:
    return lambda s: setattr(_agent(s, agent).sampling, "max_new_tokens", max_new_tokens)


def limits(agent: str = "policy", **fields: int) -> Edit:
    return lambda s: [setattr(_agent(s, agent).limits, name, value) for name, value in fields.items()]


def model(reference: model_pb2.ModelReference, agent: str = "policy") -> Edit:
    return lambda s: _agent(s, agent).model.CopyFrom(reference)


def _agent(spec: job_pb2.JobSpec, agent: str) -> job_pb2.AgentSpec:
    return spec.policy if agent == "policy" else spec.agents[int(agent)]


def builtin(name: str) -> model_pb2.ModelReference:
    return model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=name, seed=1))


def checkpoint(checkpoint_id: str) -> model_pb2.ModelReference:
    return model_pb2.ModelReference(checkpoint=model_pb2.CheckpointModel(checkpoint_id=checkpoint_id))


def local(path: str) -> model_pb2.ModelReference:
    return model_pb2.ModelReference(local=model_pb2.LocalModel(path=path))


TURN = "spec.policy.sampling.max_new_tokens"
REFUSED = {
    "a turn longer than the context": (edited(sampling(600)), f"{TURN}: 600 new tokens per turn do not fit "
                                       "the context of tiny-llama (512 tokens, the prompt included): use at most 511"),
    "a turn as long as the context": (edited(sampling(512)), f"{TURN}: 512 new tokens per turn do not fit"),
    "the smaller of the two is still too long": (
        edited(sampling(900), limits(max_new_tokens_per_turn=800)),
        "spec.policy.limits.max_new_tokens_per_turn: 800 new tokens per turn do not fit the context of "
        "tiny-llama (512 tokens"),
    "an episode longer than the context": (
        edited(limits(max_total_tokens=513)), "spec.policy.limits.max_total_tokens: 513 tokens per episode do "
        "not fit the context of tiny-llama (512 tokens): use at most 512 (0 = the context itself)"),
    "an inference job": (edited(inference, sampling(1000)), f"{TURN}: 1000 new tokens per turn do not fit"),
    "the second agent of a multi-agent job": (
        edited(two_agents, model(builtin("tiny-qwen2"), "1"), sampling(4096, "1")),
        "spec.agents[1].sampling.max_new_tokens: 4096 new tokens per turn do not fit the context of tiny-qwen2 "
        "(512 tokens"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_token_limit_beyond_a_builtin_models_context_is_refused_at_submit(redis_url: str, case: str) -> None:
    spec, words = REFUSED[case]
    error = submit_error(redis_url, spec)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(words), error.details()


ACCEPTED = {
    "the longest turn that leaves room for a prompt": edited(sampling(511)),
    "an episode exactly as long as the context": edited(limits(max_total_tokens=512)),
    "a long sampling limit cut by a short per-turn limit": edited(sampling(2000), limits(max_new_tokens_per_turn=64)),
    "a long per-turn limit cut by the 32 tokens of an unset sampling": edited(limits(max_new_tokens_per_turn=700)),
    "SFT ignores sampling": edited(sft, sampling(4096)),
    "a user's model directory (its context is unknown here)": edited(model(local("/models/big")), sampling(8000),
                                                                     limits(max_total_tokens=32000)),
    "a builtin name the Scheduler does not know (the Trainer refuses it)": edited(model(builtin("tiny-future")),
                                                                                   sampling(8000)),
    "a checkpoint no job of this Scheduler saved": edited(model(checkpoint("ckpt-elsewhere")), sampling(8000)),
}


def test_limits_that_fit_or_whose_context_is_unknown_are_accepted(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            for index, (name, spec) in enumerate(ACCEPTED.items()):
                response = await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=f"ok-{index}", spec=spec))
                assert response.created, name

    asyncio.run(scenario())


def test_a_checkpoint_has_the_context_of_its_builtin_base_through_a_chain_of_jobs(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            sft_checkpoint = await saved_final_checkpoint(h, edited(sft))
            rl_checkpoint = await saved_final_checkpoint(h, edited(model(checkpoint(sft_checkpoint))))
            for checkpoint_id in (sft_checkpoint, rl_checkpoint):
                spec = edited(model(checkpoint(checkpoint_id)), sampling(600))
                error = await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(spec=spec, validate_only=True)))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert error.details().startswith(
                    f"{TURN}: 600 new tokens per turn do not fit the context of checkpoint {checkpoint_id} (base "
                    "tiny-llama; 512 tokens, the prompt included): use at most 511"), error.details()
                fits = edited(model(checkpoint(checkpoint_id)), sampling(300))
                assert (await h.stub.SubmitJob(pb.SubmitJobRequest(spec=fits, validate_only=True))).job.spec == fits

    asyncio.run(scenario())


def test_the_context_table_is_the_builtin_models_own_config() -> None:
    pytest.importorskip("torch")
    from opentinker_runtime.ml.models import BUILTIN_MODELS

    assert BUILTIN_CONTEXT_TOKENS == {name: model.config().max_position_embeddings
                                      for name, model in BUILTIN_MODELS.items()}


async def saved_final_checkpoint(h, spec: job_pb2.JobSpec) -> str:  # noqa: ANN001
    """Run `spec` and report its final checkpoint as the Trainer names it ("<job id>-final")."""
    job = (await h.stub.SubmitJob(pb.SubmitJobRequest(spec=spec))).job
    await h.scheduler.allocator.tick()
    job = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
    checkpoint_id = f"{job.job_id}-final"
    saved = job_pb2.JobEvent(checkpoint=job_pb2.CheckpointSaved(checkpoint_id=checkpoint_id, step=10))
    await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=lease_of(job), events=[saved]))
    await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(job), final_state=job_pb2.Job.STATE_SUCCEEDED))
    return checkpoint_id


def submit_error(redis_url: str, spec: job_pb2.JobSpec) -> grpc.aio.AioRpcError:
    async def scenario() -> grpc.aio.AioRpcError:
        async with scheduler_server(redis_url) as h:
            return await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(request_id="too-long", spec=spec)))

    return asyncio.run(scenario())
