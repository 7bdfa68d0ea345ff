"""Sample with prompt_logprobs: each prompt token's logprob under the policy (temperature 1,
index 0 = 0), equal to an independent plain-torch forward of the prompt and to the Trainer's
ComputeLogprobs on the same weights; once per prompt; nothing computed when not asked."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
import torch

from opentinker_api.common.v1 import sampling_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_runtime.ml.chat import render_prompt
from opentinker_runtime.ml.sources import LoraSpec, ModelSource
from opentinker_runtime.ml.weights import lora_state_dict
from opentinker_rollout import transformers_engine
from opentinker_rollout.engine import GenerationRequest, SamplingConfig
from opentinker_rollout.errors import FailedPrecondition, InvalidArgument
from opentinker_runtime.edge.lease import LeaseContext
from opentinker_rollout.policies import LoadRequest
from opentinker_rollout.sampler import Prompt, sample
from opentinker_trainer.config import OptimizerConfig, SessionSpec
from opentinker_trainer.session_factory import create_session
from tests.rollout._policies import LORA, lora_reference, registry, transfer
from tests.rollout._servers import load, weights_requests, with_servers
from tests.rollout._support import MODEL_NAME, full_forward_logprobs, tiny_engine, tiny_model

TOLERANCE = 1e-4
CHAT = [{"role": "user", "content": "What is 12+30?"}]
TOKEN_PROMPTS = [list(range(40, 43)), list(range(70, 81)), [5, 200, 17, 17, 99, 3, 250] * 4]
SAMPLED = sampling_pb2.SamplingParams(max_new_tokens=4, temperature=0.7, top_k=20, n=3, seed=9)


def token_prompt(tokens: list[int]) -> pb.Prompt:
    return pb.Prompt(tokens={"tokens": tokens})


def chat_prompt() -> pb.Prompt:
    return pb.Prompt(messages=pb.ChatMessages(messages=[pb.ChatMessage(**m) for m in CHAT]))


def all_prompt_ids() -> list[list[int]]:
    return [list(render_prompt(tiny_model().tokenizer, CHAT)), *TOKEN_PROMPTS]


def plain_prompt_logprobs(model: torch.nn.Module, prompt: list[int]) -> list[float]:
    """Index 0 = 0, index t = log p(prompt[t] | prompt[:t]) from one unpadded forward."""
    logp_T_V = full_forward_logprobs(model, prompt)
    return [0.0] + [float(logp_T_V[t - 1, prompt[t]]) for t in range(1, len(prompt))]


def max_difference(actual, expected) -> float:
    assert len(actual) == len(expected)
    return max(abs(a - b) for a, b in zip(actual, expected, strict=True))


def sample_request(policy_id: str, **kwargs) -> pb.SampleRequest:
    prompts = [chat_prompt(), *(token_prompt(p) for p in TOKEN_PROMPTS)]
    return pb.SampleRequest(policy_id=policy_id, prompts=prompts, sampling=SAMPLED, **kwargs)


def check_against(model: torch.nn.Module, response: pb.SampleResponse) -> float:
    """Every prompt's logprobs match `model`'s plain forward; the largest difference."""
    worst = 0.0
    for result, prompt in zip(response.results, all_prompt_ids(), strict=True):
        assert result.prompt_length == len(prompt) == len(result.prompt_logprobs)
        assert result.prompt_logprobs[0] == 0.0
        assert all(value < 0 for value in result.prompt_logprobs[1:])
        assert len(result.completions) == 3
        worst = max(worst, max_difference(result.prompt_logprobs, plain_prompt_logprobs(model, prompt)))
    return worst


def test_prompt_logprobs_of_padded_prompts_equal_a_plain_forward_for_base_and_lora(tmp_path):
    """Four prompts of lengths 3 to 28 in one request (left-padded together), n = 3 at
    temperature 0.7 with top-k: the numbers are the model's temperature-1 ones, first with the
    zero adapter (the base), then with the adapter UpdateWeights sent."""
    reference = lora_reference()

    async def scenario(stub, game):
        policy = await load(stub)
        base = await stub.Sample(sample_request(policy.policy_id, prompt_logprobs=True))
        await stub.UpdateWeights(weights_requests(policy.policy_id, lora_state_dict(reference), 1))
        tuned = await stub.Sample(sample_request(policy.policy_id, prompt_logprobs=True))
        return base, tuned

    base, tuned = asyncio.run(with_servers(scenario, tmp_path))
    assert check_against(tiny_model().model, base) < TOLERANCE
    assert check_against(reference, tuned) < TOLERANCE
    assert all(c.policy_version == 1 for r in tuned.results for c in r.completions)
    # the adapter changed the numbers: the comparison above could not pass on base weights
    assert max_difference(tuned.results[1].prompt_logprobs, base.results[1].prompt_logprobs) > 0.05


def test_without_prompt_logprobs_the_field_stays_empty_and_no_extra_forward_runs():
    engine = tiny_engine()
    calls = []
    hook = engine.model.register_forward_hook(lambda module, args, kwargs: calls.append(1))
    one_token = SamplingConfig(max_new_tokens=1, n=2, seed=3)
    try:
        plain = engine.generate([GenerationRequest(prompt_ids=(40, 41, 42), sampling=one_token)])
        plain_calls = len(calls)
        scored = engine.generate([GenerationRequest(prompt_ids=(40, 41, 42), sampling=one_token,
                                                    prompt_logprobs=True)])
    finally:
        hook.remove()
    assert [g.prompt_logprobs for g in plain[0]] == [(), ()]
    assert plain_calls == 1                         # the prefill only
    assert len(calls) - plain_calls == 2            # the prefill and one scoring forward for both samples
    assert scored[0][0].prompt_logprobs is scored[0][1].prompt_logprobs
    assert [g.token_ids for g in scored[0]] == [g.token_ids for g in plain[0]]


def test_sample_rpc_without_the_flag_returns_no_prompt_logprobs(tmp_path):
    async def scenario(stub, game):
        policy = await load(stub, lora=False)
        return await stub.Sample(sample_request(policy.policy_id))

    response = asyncio.run(with_servers(scenario, tmp_path))
    assert [list(r.prompt_logprobs) for r in response.results] == [[], [], [], []]
    assert all(len(r.completions) == 3 for r in response.results)


def test_small_forward_chunks_and_mixed_adapters_give_the_same_numbers(tmp_path, monkeypatch):
    """Two LoRA policies on one base, scored in the same engine step, with the chunk bound so
    small that every prompt is a forward of its own: each matches its own adapter's forward."""
    wide = LoraSpec(rank=8, alpha=16.0, target_modules=("q_proj", "v_proj"))
    references = (lora_reference(LORA, seed=1), lora_reference(wide, seed=2))
    monkeypatch.setattr(transformers_engine, "PROMPT_LOGPROB_TOKENS", 8)
    prompts = [Prompt(token_ids=tuple(p)) for p in TOKEN_PROMPTS]
    sampling = SamplingConfig(max_new_tokens=3, temperature=1.0, n=2, seed=4)

    async def scenario():
        reg = registry(tmp_path)
        source = ModelSource.builtin(MODEL_NAME, 0)
        policies = []
        for job, spec, reference in zip(("a", "b"), (LORA, wide), references, strict=True):
            lease = LeaseContext(job_id=job)
            info = await reg.load(LoadRequest(source=source, lora=spec, lease=lease, max_batch_size=16))
            await reg.update_weights(info.policy_id, lease, *transfer(lora_state_dict(reference), 1))
            policies.append(reg.get(info.policy_id))
        answers = await asyncio.gather(*(sample(p, prompts, sampling, prompt_logprobs=True) for p in policies))
        stats = policies[0].batcher.stats
        await reg.close()
        return answers, stats

    answers, stats = asyncio.run(scenario())
    assert stats.max_rows_in_call == 12             # both policies' rows were in one engine step
    for results, reference in zip(answers, references, strict=True):
        for result, prompt in zip(results, TOKEN_PROMPTS, strict=True):
            assert max_difference(result.prompt_logprobs, plain_prompt_logprobs(reference, prompt)) < TOLERANCE
    assert max_difference(answers[0][2].prompt_logprobs, answers[1][2].prompt_logprobs) > 0.05


def test_token_bounded_chunks_group_prompts_within_the_padded_budget():
    keys = [("", (1,) * 3), ("", (1,) * 5), ("", (1,) * 2), ("", (1,) * 20), ("", (1,) * 4)]
    chunks = transformers_engine._token_bounded_chunks(keys, 10)
    assert [[len(prompt) for _, prompt in chunk] for chunk in chunks] == [[3, 5], [2], [20], [4]]


def test_the_trainer_computes_the_same_logprobs_on_the_exported_weights(tmp_path):
    """A Trainer session (LoRA) takes an optimizer step; its adapter goes to the Rollout policy
    through UpdateWeights; the Trainer's ComputeLogprobs (temperature 1) of each prompt equals
    the Rollout's prompt logprobs."""
    session = create_session("prompt-logprobs", SessionSpec(
        base=ModelSource.builtin(MODEL_NAME, 0), lora=LoraSpec(rank=4, alpha=8.0),
        optimizer=OptimizerConfig(learning_rate=0.05)), checkpoint_root=tmp_path)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(5)
        for name, parameter in session.model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    prompts = all_prompt_ids()
    trainer_logprobs = session.compute_logprobs(prompts, reference=False, temperature=1.0)
    exported = {name: tensor.clone() for name, tensor in lora_state_dict(session.model).items()}

    async def scenario(stub, game):
        policy = await load(stub)
        await stub.UpdateWeights(weights_requests(policy.policy_id, exported, 1))
        return await stub.Sample(sample_request(policy.policy_id, prompt_logprobs=True))

    response = asyncio.run(with_servers(scenario, tmp_path))
    base = [plain_prompt_logprobs(tiny_model().model, p) for p in prompts]
    for result, expected, base_values in zip(response.results, trainer_logprobs, base, strict=True):
        assert max_difference(result.prompt_logprobs, expected) < TOLERANCE
        assert max_difference(result.prompt_logprobs, base_values) > 0.05


def _policy(engine) -> SimpleNamespace:
    return SimpleNamespace(engine=engine, model_info=SimpleNamespace(vocab_size=260))


def test_an_engine_without_prompt_logprobs_is_a_failed_precondition():
    policy = _policy(SimpleNamespace(supports_prompt_logprobs=False, max_context_length=512))
    with pytest.raises(FailedPrecondition, match="prompt_logprobs"):
        asyncio.run(sample(policy, [Prompt(token_ids=(1, 2, 3))], SamplingConfig(), prompt_logprobs=True))


def test_a_prompt_longer_than_the_context_window_names_the_prompt():
    policy = _policy(SimpleNamespace(supports_prompt_logprobs=True, max_context_length=4))
    prompts = [Prompt(token_ids=(1, 2)), Prompt(token_ids=(1, 2, 3, 4, 5))]
    with pytest.raises(InvalidArgument, match=r"prompts\[1\]: has 5 tokens"):
        asyncio.run(sample(policy, prompts, SamplingConfig(), prompt_logprobs=True))


def test_an_over_long_prompt_is_invalid_argument_over_grpc(tmp_path):
    async def scenario(stub, game):
        policy = await load(stub, lora=False)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.Sample(pb.SampleRequest(policy_id=policy.policy_id, prompt_logprobs=True,
                                               prompts=[token_prompt([7] * 513)]))
        return error.value

    error = asyncio.run(with_servers(scenario, tmp_path))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("prompts[0]")


def test_held_prompt_kv_does_not_change_prompt_logprobs(tmp_path):
    """A request whose prompt a running row already holds (continuous batching copies its KV)
    still gets the numbers of a forward of its own."""
    prompt = tuple(TOKEN_PROMPTS[1])
    long_run = SamplingConfig(max_new_tokens=200, temperature=1.0, seed=3)  # runs all 200
    short = SamplingConfig(max_new_tokens=1, temperature=1.0, seed=2)

    async def scenario():
        reg = registry(tmp_path)
        info = await reg.load(LoadRequest(source=ModelSource.builtin(MODEL_NAME, 0)))
        policy = reg.get(info.policy_id)
        first = GenerationRequest(prompt_ids=prompt, sampling=long_run)
        running = asyncio.create_task(policy.generator.generate(first))
        while not policy.engine.running_rows:       # the first request's row holds the prompt
            await asyncio.sleep(0.001)
        answer = await policy.generator.generate(GenerationRequest(prompt_ids=prompt, sampling=short,
                                                                   prompt_logprobs=True))
        overlapped = not running.done()
        await running
        await reg.close()
        return answer, overlapped

    answer, overlapped = asyncio.run(scenario())
    assert overlapped                               # admitted while the first row held the prompt
    expected = plain_prompt_logprobs(tiny_model().model, list(prompt))
    assert max_difference(answer.generations[0].prompt_logprobs, expected) < TOLERANCE
