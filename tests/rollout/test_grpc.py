"""The RolloutService in-process on a real port, against a small but real EnvHost gRPC server
(a deterministic counting game), called through the generated stubs."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import json_format

from opentinker_api.common.v1 import resources_pb2, sampling_pb2, trajectory_pb2
from opentinker_api.common.v1.environment_pb2 import EnvironmentReference
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_runtime.ml.chat import render_observation_turn, render_prompt
from opentinker_runtime.ml.weights import lora_state_dict
from tests.rollout._policies import lora_reference
from tests.rollout._servers import LEASE, load, weights_requests, with_servers
from tests.rollout._support import tiny_model

EVERY_TOKEN = list(range(260))  # stop after one token: every action is exactly one token


def episodes_request(policy_id, env_name="count", lease=LEASE):
    specs = [pb.EpisodeSpec(group_id=f"q{i}", seed=100 + i) for i in range(2)]
    for i, spec in enumerate(specs):
        spec.reset_kwargs.update({"start": i})
    return pb.RunEpisodesRequest(
        policy_id=policy_id, lease=lease, environment=EnvironmentReference(env_name=env_name),
        episodes=specs, group_size=3, limits=sampling_pb2.AgentLoopLimits(max_turns=4),
        sampling=sampling_pb2.SamplingParams(max_new_tokens=8, temperature=1.0,
                                             stop_token_ids=EVERY_TOKEN))


def test_run_episodes_plays_groups_against_the_envhost(tmp_path):
    async def scenario(stub, game):
        policy = await load(stub)
        items = [item async for item in stub.RunEpisodes(episodes_request(policy.policy_id))]
        return policy, items, game

    policy, items, game = asyncio.run(with_servers(scenario, tmp_path))
    assert policy.policy_version == 0 and policy.engine == pb.ENGINE_TRANSFORMERS
    assert policy.job_id == "job-7" and list(policy.model_info.stop_token_ids) == [259]
    trajectories = [item.trajectory for item in items]
    assert len(trajectories) == 6 and all(item.HasField("trajectory") for item in items)
    assert sorted((t.group_id, t.episode_index) for t in trajectories) == [
        (g, i) for g in ("q0", "q1") for i in range(3)]
    assert sorted(game.resets, key=lambda r: r[1]) == [({"start": 0}, 100)] * 3 + [({"start": 1}, 101)] * 3
    assert game.closed == 6
    for trajectory in trajectories:
        check_two_turn_trajectory(trajectory)


def check_two_turn_trajectory(t: trajectory_pb2.Trajectory) -> None:
    tokenizer = tiny_model().tokenizer
    start = int(t.group_id[1])
    prompt = render_prompt(tokenizer, [{"role": "system", "content": "Count with me."},
                                       {"role": "user", "content": f"Ready?\n\nStart at {start}."}])
    observation = render_observation_turn(tokenizer, "Next.", action_closed=False)
    assert t.stop_reason == trajectory_pb2.STOP_REASON_DONE and t.total_reward == 2.0
    assert t.prompt_length == len(prompt) and list(t.token_ids[:len(prompt)]) == prompt
    expected_mask = [0] * len(prompt) + [1] + [0] * len(observation) + [1]
    assert list(t.loss_mask) == expected_mask
    rewarded = [i for i, r in enumerate(t.token_rewards) if r]  # on each turn's sampled token
    assert rewarded == [len(prompt), len(expected_mask) - 1] and sum(t.token_rewards) == t.total_reward
    assert list(t.token_ids[len(prompt) + 1:-1]) == observation
    assert len(t.sampling_logprobs) == len(t.token_ids)
    pairs = list(zip(t.sampling_logprobs, t.loss_mask, strict=True))
    assert all(lp < 0 for lp, m in pairs if m) and not any(lp for lp, m in pairs if not m)
    first, second = t.turns
    assert (first.action_start, first.action_end) == (len(prompt), len(prompt) + 1)
    assert (first.observation_start, first.observation_end) == (len(prompt) + 1, len(t.token_ids) - 1)
    assert first.observation_text == "Next." and json_format.MessageToDict(second.info) == {"correct": True}
    assert t.prompt_text.startswith("<|im_start|>system\nCount with me.<|im_end|>")
    assert t.trajectory_id == f"{t.group_id}:{t.episode_index}"


def test_environment_failures_are_trajectories_and_bad_requests_are_status_codes(tmp_path):
    async def scenario(stub, game):
        policy = await load(stub)
        broken = [i async for i in stub.RunEpisodes(episodes_request(policy.policy_id, "broken"))]
        errors = {}
        for name, request in {
            "no_episodes": pb.RunEpisodesRequest(policy_id=policy.policy_id, lease=LEASE,
                                                 environment=EnvironmentReference(env_name="count")),
            "unknown_policy": episodes_request("nope"),
            "stale": episodes_request(policy.policy_id, lease=resources_pb2.LeaseContext(
                job_id="job-7", fencing_token=2)),
        }.items():
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                _ = [i async for i in stub.RunEpisodes(request)]
            errors[name] = caught.value
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.LoadModel(pb.LoadModelRequest())
        errors["no_model"] = caught.value
        return broken, errors

    broken, errors = asyncio.run(with_servers(scenario, tmp_path))
    assert len(broken) == 6
    for item in broken:
        assert item.trajectory.stop_reason == trajectory_pb2.STOP_REASON_ENV_ERROR
        assert "the game raised ValueError: broken" in item.trajectory.env_error
        assert list(item.trajectory.token_ids) == []
    assert errors["no_episodes"].code() == grpc.StatusCode.INVALID_ARGUMENT
    assert errors["no_episodes"].details().startswith("episodes:")
    assert errors["unknown_policy"].code() == grpc.StatusCode.NOT_FOUND
    assert errors["stale"].code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(errors["stale"]) == "ERROR_REASON_STALE_FENCING_TOKEN"
    assert errors["no_model"].code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "model" in errors["no_model"].details()


def reason(error: grpc.aio.AioRpcError) -> str:
    return dict(error.trailing_metadata() or ()).get("opentinker-reason", "")


def test_sample_update_weights_and_unload(tmp_path):
    greedy = sampling_pb2.SamplingParams(max_new_tokens=10, temperature=0.0)
    chat = pb.Prompt(messages=pb.ChatMessages(messages=[pb.ChatMessage(role="user", content="Hi")]))
    tokens = pb.Prompt(tokens={"tokens": list(range(40, 60))})

    async def scenario(stub, game):
        policy = await load(stub)
        seeded = await stub.Sample(pb.SampleRequest(
            policy_id=policy.policy_id, prompts=[chat, tokens],
            sampling=sampling_pb2.SamplingParams(max_new_tokens=6, temperature=1.0, n=2, seed=5)))
        greedy_request = pb.SampleRequest(policy_id=policy.policy_id, prompts=[tokens], sampling=greedy)
        before = await stub.Sample(greedy_request)
        state = lora_state_dict(lora_reference())
        updated = await stub.UpdateWeights(weights_requests(policy.policy_id, state, 1))
        after = await stub.Sample(greedy_request)
        with pytest.raises(grpc.aio.AioRpcError) as conflict:
            await stub.UpdateWeights(weights_requests(policy.policy_id, state, 1))
        await stub.UnloadModel(pb.UnloadModelRequest(policy_id=policy.policy_id, lease=LEASE))
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await stub.Sample(greedy_request)
        return seeded, before, updated, after, conflict.value, gone.value

    seeded, before, updated, after, conflict, gone = asyncio.run(with_servers(scenario, tmp_path))
    prompt_len = len(render_prompt(tiny_model().tokenizer, [{"role": "user", "content": "Hi"}]))
    assert [r.prompt_length for r in seeded.results] == [prompt_len, 20]
    for result in seeded.results:
        assert len(result.completions) == 2
        assert all(len(c.tokens) == len(c.logprobs) > 0 and c.policy_version == 0 for c in result.completions)
    assert updated.policy.policy_version == 1 and updated.bytes_received > 0
    (old,), (new,) = before.results[0].completions, after.results[0].completions
    assert old.policy_version == 0 and new.policy_version == 1 and list(old.tokens) != list(new.tokens)
    assert new.stop_reason == trajectory_pb2.STOP_REASON_MAX_TURN_TOKENS
    assert conflict.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(conflict) == "ERROR_REASON_WEIGHTS_VERSION_CONFLICT"
    assert gone.code() == grpc.StatusCode.NOT_FOUND
