"""Shared prompt prefixes (shared_prefix.py): a ForwardBackward that runs each distinct prefix
once gives the same loss, logprobs (every position, prompt included), metrics and gradients
as the plain forward over whole sequences, for full and LoRA sessions, several losses and
aggregations (the token-sum norm's longest sequence included), groups whose prompts differ in
length, multi-turn datums and datums that train nothing; and it really runs fewer tokens."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import pytest
import torch

from opentinker_runtime.ml.sources import LoraSpec
from opentinker_trainer import prefix_check, shared_prefix
from opentinker_trainer.batching import Datum
from opentinker_trainer.config import (ImportanceMask, KlPlacement, LossAggregation, LossConfig,
                                       LossFunction)
from opentinker_trainer.shared_prefix import split_shared_prefixes
from tests.trainer.helpers import rows_close, session

PROMPT_LENGTHS = (5, 11, 8)
GROUP_SIZE = 3


def grpo_datums(seed: int = 0) -> list[Datum]:
    """GROUP_SIZE completions per prompt, prompts of several lengths; in the second group a
    multi-turn datum (an observation between two trained turns), in the third one that trains
    nothing (its whole mask 0)."""
    rng = random.Random(seed)
    datums = []
    for group, prompt_length in enumerate(PROMPT_LENGTHS):
        prompt = [rng.randrange(256) for _ in range(prompt_length)]
        for member in range(GROUP_SIZE):
            completion = [rng.randrange(256) for _ in range(rng.randint(2, 7))]
            mask = [0.0] * prompt_length + [1.0] * len(completion)
            if group == 1 and member == 0:
                observation, reply = [rng.randrange(256) for _ in range(3)], [rng.randrange(256) for _ in range(2)]
                completion += observation + reply
                mask += [0.0] * 3 + [1.0] * 2
            if group == 2 and member == 2:
                mask = [0.0] * len(mask)
            tokens = prompt + completion
            datums.append(Datum(
                tokens=tuple(tokens), loss_mask=tuple(mask), group_id=f"g{group}",
                advantages=(rng.choice((-1.0, 0.5, 1.0)),) * len(tokens),
                sampling_logprobs=tuple(rng.uniform(-6.0, -4.5) for _ in tokens)))
    return datums


@contextlib.contextmanager
def sharing(enabled: bool) -> Iterator[None]:
    before = shared_prefix.enabled()
    shared_prefix.set_enabled(enabled)
    try:
        yield
    finally:
        shared_prefix.set_enabled(before)


def run(enabled: bool, loss: LossConfig, **session_kwargs):
    """(result, gradients) of one ForwardBackward; asserts how many token positions the model's
    embedding saw: all of every datum (plain), fewer (shared; the first batch's check aside)."""
    s = session(**session_kwargs)
    seen = []
    hook = s.model.get_input_embeddings().register_forward_hook(
        lambda module, args, out: seen.append(args[0].numel()))
    with sharing(enabled):
        s.forward_backward(grpo_datums(), loss)  # the first batch also runs the model check
        s.optimizer.zero_grad(set_to_none=True)
        seen.clear()
        result = s.forward_backward(grpo_datums(), loss)
    hook.remove()
    padded_whole = len(grpo_datums()) * max(len(d.tokens) for d in grpo_datums())
    if "max_tokens" not in session_kwargs:  # one micro-batch, no pre-pass
        assert (sum(seen) < 0.8 * padded_whole) if enabled else (seen == [padded_whole])
    grads = {n: p.grad.clone() for n, p in s.model.named_parameters() if p.grad is not None}
    return result, grads


LOSSES = {
    "ppo_token_mean": LossConfig(function=LossFunction.PPO_CLIP, clip_low=0.2, clip_high=0.28),
    "gspo_sequence_mean": LossConfig(function=LossFunction.GSPO, clip_low=0.2, clip_high=0.2,
                                     aggregation=LossAggregation.SEQUENCE_MEAN),
    "pg_token_sum_norm_masked": LossConfig(function=LossFunction.POLICY_GRADIENT,
                                           aggregation=LossAggregation.TOKEN_SUM_NORM,
                                           importance_mask=ImportanceMask.TOKEN,
                                           entropy_coef=0.01, temperature=0.7),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("model", ["tiny-llama", "tiny-qwen2"])
def test_shared_prefixes_give_the_plain_forwards_loss_logprobs_metrics_and_gradients(name, model):
    plain, plain_grads = run(False, LOSSES[name], model=model)
    shared, shared_grads = run(True, LOSSES[name], model=model)
    assert shared.loss == pytest.approx(plain.loss, rel=1e-4, abs=1e-6)
    assert rows_close(shared.logprobs, plain.logprobs, atol=1e-4)
    assert shared.metrics.keys() == plain.metrics.keys()
    datums = grpo_datums()
    split = split_shared_prefixes(datums)
    whole = sum(len(d.tokens) for d in datums)
    assert plain.metrics.pop("prefix_shared_fraction") == 0.0
    assert shared.metrics.pop("prefix_shared_fraction") == pytest.approx(
        1 - (sum(map(len, split.prefixes)) + sum(len(s.tokens) for s in split.suffixes)) / whole)
    for key, value in plain.metrics.items():
        assert shared.metrics[key] == pytest.approx(value, rel=1e-3, abs=1e-5), key
    assert shared_grads.keys() == plain_grads.keys() and plain_grads
    for key, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[key], grad, rtol=1e-3, atol=1e-6, msg=key)


def test_micro_batches_with_the_importance_pre_pass_share_within_each_micro_batch():
    """A token budget splits the batch, so the importance mask comes from the pre-pass and
    travels with the datums, cut with them; the sums over micro-batches stay the plain ones."""
    loss = LOSSES["pg_token_sum_norm_masked"]
    plain, plain_grads = run(False, loss, model="tiny-llama", max_tokens=60)
    shared, shared_grads = run(True, loss, model="tiny-llama", max_tokens=60)
    assert shared.metrics["is/masked_fraction"] > 0  # the mask is really in play
    assert shared.metrics["prefix_shared_fraction"] > 0 == plain.metrics["prefix_shared_fraction"]
    assert shared.loss == pytest.approx(plain.loss, rel=1e-4, abs=1e-6)
    assert rows_close(shared.logprobs, plain.logprobs, atol=1e-4)
    for key, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[key], grad, rtol=1e-3, atol=1e-6, msg=key)


def test_lora_sessions_share_prefixes_with_the_same_adapter_gradients():
    lora = LoraSpec(rank=4, alpha=8)
    plain, plain_grads = run(False, LOSSES["ppo_token_mean"], lora=lora, model="tiny-llama")
    shared, shared_grads = run(True, LOSSES["ppo_token_mean"], lora=lora, model="tiny-llama")
    assert plain_grads and all("lora" in key for key in plain_grads)
    assert rows_close(shared.logprobs, plain.logprobs, atol=1e-4)
    for key, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[key], grad, rtol=1e-3, atol=1e-6, msg=key)


KL_LOSSES = {
    "kl_in_loss": LossConfig(function=LossFunction.PPO_CLIP, kl_coef=0.1, kl_placement=KlPlacement.LOSS),
    "kl_in_reward": LossConfig(function=LossFunction.PPO_CLIP, kl_coef=0.1, kl_placement=KlPlacement.REWARD),
}


@pytest.mark.parametrize("name", sorted(KL_LOSSES))
def test_a_reference_model_scores_whole_sequences_and_the_policy_still_shares(name):
    """LoRA: the reference is the base (adapter off); the KL term reads its logprobs of every
    trained token, taken over the whole sequences before the policy's shared-prefix forward."""
    kwargs = {"lora": LoraSpec(rank=4, alpha=8), "model": "tiny-llama", "lr": 0.5}
    s = session(**kwargs)
    with sharing(True):  # one update, so the policy is no longer the reference
        s.forward_backward(grpo_datums(seed=1), LOSSES["ppo_token_mean"])
        s.optim_step()
    state = {k: v.clone() for k, v in s.model.state_dict().items()}
    results = {}
    for enabled in (False, True):
        s.model.load_state_dict(state)
        s.optimizer.zero_grad(set_to_none=True)
        with sharing(enabled):
            result = s.forward_backward(grpo_datums(), KL_LOSSES[name])
        grads = {n: p.grad.clone() for n, p in s.model.named_parameters() if p.grad is not None}
        results[enabled] = (result, grads)
    (plain, plain_grads), (shared, shared_grads) = results[False], results[True]
    kl_metric = "kl" if name == "kl_in_loss" else "kl_reward/kl"
    assert plain.metrics[kl_metric] > 1e-6  # the policy has moved away from the reference
    assert shared.metrics[kl_metric] == pytest.approx(plain.metrics[kl_metric], rel=1e-3)
    assert shared.loss == pytest.approx(plain.loss, rel=1e-4, abs=1e-6)
    for key, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[key], grad, rtol=1e-3, atol=1e-6, msg=key)


def test_a_batch_of_groups_runs_each_prompt_once():
    datums = grpo_datums()
    split = split_shared_prefixes(datums)
    assert split is not None
    assert len(split.prefixes) == len(PROMPT_LENGTHS)
    assert split.owner == tuple(g for g in range(len(PROMPT_LENGTHS)) for _ in range(GROUP_SIZE))
    whole = sum(len(d.tokens) for d in datums)
    run_tokens = sum(len(p) for p in split.prefixes) + sum(len(s.tokens) for s in split.suffixes)
    prompt_cuts = [p - 1 for p in PROMPT_LENGTHS for _ in range(GROUP_SIZE)]  # the suffix starts one early
    assert split.cuts == tuple(prompt_cuts)
    assert run_tokens == sum(PROMPT_LENGTHS) - len(PROMPT_LENGTHS) + whole - sum(prompt_cuts) < whole
    for datum, suffix, cut in zip(datums, split.suffixes, split.cuts):
        assert datum.tokens[cut:] == suffix.tokens and datum.loss_mask[cut:] == suffix.loss_mask
        assert datum.sampling_logprobs[cut:] == suffix.sampling_logprobs


def test_batches_without_a_shared_prefix_keep_the_plain_forward():
    distinct = [Datum(tokens=(i, 1, 2, 3), loss_mask=(0.0, 0.0, 1.0, 1.0)) for i in range(4)]
    trained_from_the_start = [Datum(tokens=(1, 2, 3), loss_mask=(0.0, 1.0, 1.0))] * 4
    assert split_shared_prefixes(distinct) is None
    assert split_shared_prefixes(trained_from_the_start) is None


def test_a_model_whose_cached_forward_disagrees_keeps_the_plain_forward(monkeypatch):
    s = session(model="tiny-qwen2")
    real_forward = shared_prefix.forward_with_prefixes

    def skewed(*args, **kwargs):
        out = real_forward(*args, **kwargs)
        return shared_prefix.PrefixForward(logits_B_S_V=out.logits_B_S_V + torch.randn_like(out.logits_B_S_V),
                                           prefix_logprobs_U_P=out.prefix_logprobs_U_P,
                                           cut_logprobs_B=out.cut_logprobs_B)

    monkeypatch.setattr(shared_prefix, "forward_with_prefixes", skewed)
    monkeypatch.setattr(prefix_check, "forward_with_prefixes", skewed)
    with sharing(True):
        result = s.forward_backward(grpo_datums(), LOSSES["ppo_token_mean"])
    assert prefix_check.shares_prefixes(s.model, [], None, 1.0, "cpu") is False
    monkeypatch.undo()
    plain, _ = run(False, LOSSES["ppo_token_mean"], model="tiny-qwen2")
    assert rows_close(result.logprobs, plain.logprobs, atol=1e-5)
