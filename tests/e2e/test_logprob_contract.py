"""Rollout's sampling logprobs equal the Trainer's recomputation on the same tokens (fp32)."""

from __future__ import annotations

import grpc
import pytest

from google.protobuf import struct_pb2

from opentinker_api.common.v1 import (
    algorithm_pb2,
    datum_pb2,
    environment_pb2,
    model_pb2,
    resources_pb2,
    sampling_pb2,
)
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as rollout_grpc
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as trainer_grpc
from opentinker_runtime.ml.chat import render_prompt
from opentinker_runtime.ml.tokenizer import build_byte_tokenizer

from opentinker.client.channels import keyed_channel

TOLERANCE = 1e-4
MODEL = model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-llama", seed=11))
FULL = model_pb2.Adaptation(full=model_pb2.FullAdaptation())


def lease(job_id: str) -> resources_pb2.LeaseContext:
    return resources_pb2.LeaseContext(job_id=job_id, lease_id=f"{job_id}-lease", fencing_token=1)


@pytest.fixture
def stubs(stack):
    with keyed_channel(stack.address("trainer"), stack.api_key) as trainer, \
            keyed_channel(stack.address("rollout"), stack.api_key) as rollout:
        yield trainer_grpc.TrainerServiceStub(trainer), rollout_grpc.RolloutServiceStub(rollout)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_match_trainer_compute_logprobs(stubs, temperature):
    trainer, rollout = stubs
    job = f"contract-{int(temperature * 10)}"
    session = trainer.CreateSession(trainer_pb.CreateSessionRequest(
        lease=lease(job), base_model=MODEL, adaptation=FULL,
        optimizer=algorithm_pb2.OptimizerConfig(learning_rate=1e-3))).session
    policy = rollout.LoadModel(rollout_pb.LoadModelRequest(lease=lease(job), model=MODEL)).policy
    messages = [{"role": "user", "content": "12+30="}]
    prompt = rollout_pb.Prompt(messages=rollout_pb.ChatMessages(
        messages=[rollout_pb.ChatMessage(**m) for m in messages]))
    sampled = rollout.Sample(rollout_pb.SampleRequest(
        policy_id=policy.policy_id, prompts=[prompt],
        sampling=sampling_pb2.SamplingParams(max_new_tokens=12, temperature=temperature, n=3, seed=5)))
    result = sampled.results[0]
    assert len(result.completions) == 3
    prompt_ids = render_prompt(build_byte_tokenizer(), messages)
    assert result.prompt_length == len(prompt_ids)
    checked = 0
    for completion in result.completions:
        full = list(prompt_ids) + list(completion.tokens)
        recomputed = trainer.ComputeLogprobs(trainer_pb.ComputeLogprobsRequest(
            session_id=session.session_id, sequences=[datum_pb2.TokenSequence(tokens=full)],
            temperature=temperature)).logprobs[0].logprobs
        for offset, logprob in enumerate(completion.logprobs):
            assert abs(recomputed[result.prompt_length + offset] - logprob) < TOLERANCE
            checked += 1
    assert checked >= 3


def test_multi_turn_trajectories_score_the_same_in_the_trainer(stubs):
    """Whole multi-turn episodes (prompt, actions, observations as the policy saw them): the
    Trainer's logprob of every sampled token equals the sampling logprob Rollout recorded."""
    trainer, rollout = stubs
    job = "contract-multi-turn"
    session = trainer.CreateSession(trainer_pb.CreateSessionRequest(
        lease=lease(job), base_model=MODEL, adaptation=FULL,
        optimizer=algorithm_pb2.OptimizerConfig(learning_rate=1e-3))).session
    policy = rollout.LoadModel(rollout_pb.LoadModelRequest(lease=lease(job), model=MODEL)).policy
    config = struct_pb2.Struct()
    config.update({"low": 1, "high": 9, "max_turns": 3, "seed": 1})
    kwargs = struct_pb2.Struct()
    kwargs.update({"index": 0, "split": "train"})
    request = rollout_pb.RunEpisodesRequest(
        policy_id=policy.policy_id, lease=lease(job),
        environment=environment_pb2.EnvironmentReference(env_name="guess_number", config=config),
        episodes=[rollout_pb.EpisodeSpec(group_id="g0", reset_kwargs=kwargs, seed=3)], group_size=4,
        # every printable character is a stop string: each action ends after one sampled character,
        # so even an untrained policy gets observations back and plays several turns
        sampling=sampling_pb2.SamplingParams(max_new_tokens=3, temperature=1.0,
                                             stop=[chr(code) for code in range(32, 127)]),
        limits=sampling_pb2.AgentLoopLimits(max_turns=3))
    trajectories = [r.trajectory for r in rollout.RunEpisodes(request) if r.WhichOneof("item") == "trajectory"]
    assert len(trajectories) == 4
    multi_turn = 0
    for t in trajectories:
        multi_turn += len(t.turns) > 1
        recomputed = trainer.ComputeLogprobs(trainer_pb.ComputeLogprobsRequest(
            session_id=session.session_id, sequences=[datum_pb2.TokenSequence(tokens=list(t.token_ids))],
            temperature=1.0)).logprobs[0].logprobs
        for index, (mask, logprob) in enumerate(zip(t.loss_mask, t.sampling_logprobs, strict=True)):
            if mask:
                assert abs(recomputed[index] - logprob) < TOLERANCE, (index, recomputed[index], logprob)
    assert multi_turn >= 1  # the check covered tokens sampled after an observation
