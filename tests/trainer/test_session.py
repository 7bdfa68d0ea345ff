"""TrainingSession: SFT learns, micro-batching is exact, steps and references behave."""

from __future__ import annotations

import pytest
import torch

from opentinker_runtime.ml.sources import LoraSpec
from opentinker_trainer.batching import Datum
from opentinker_trainer.config import KlEstimator, KlPlacement, LossAggregation, LossConfig, LossFunction
from opentinker_trainer.errors import NoGradientsError, NoReferenceError, ValidationError
from opentinker_runtime.ml.models import build_builtin
from tests.trainer.helpers import CE, MODEL, PPO, rl_datums, rows_close, session, sft_datums

PPO_KL = LossConfig(function=LossFunction.PPO_CLIP, clip_low=0.2, clip_high=0.2, kl_coef=0.1,
                    kl_placement=KlPlacement.LOSS)


def test_sft_on_fixed_chat_examples_drives_the_loss_down() -> None:
    s = session(lr=1e-2)
    datums = sft_datums()
    losses = []
    for _ in range(20):
        losses.append(s.forward_backward(datums, CE).loss)
        s.optim_step()
    assert losses[-1] < 0.3 * losses[0], losses
    assert s.step == 20 and s.policy_version == 20 and s.pending_datums == 0


@pytest.mark.parametrize("aggregation", list(LossAggregation))
def test_micro_batched_gradients_equal_whole_batch_gradients(aggregation) -> None:
    loss = LossConfig(function=LossFunction.PPO_CLIP, clip_low=0.2, clip_high=0.2,
                      aggregation=aggregation, entropy_coef=0.01)
    datums = rl_datums(count=5, length=14)
    whole, split = session(), session(max_tokens=28)
    result_whole = whole.forward_backward(datums, loss)
    result_split = split.forward_backward(datums, loss)
    assert result_split.loss == pytest.approx(result_whole.loss, rel=1e-5)
    for (name, a), b in zip(whole.model.named_parameters(), split.model.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name
    assert rows_close(result_split.logprobs, result_whole.logprobs)


def test_forward_backward_reports_logprobs_per_datum_and_metrics() -> None:
    s = session()
    datums = rl_datums(count=3, length=10)
    result = s.forward_backward(datums, PPO)
    assert [len(row) for row in result.logprobs] == [10, 9, 8]
    expected = s.compute_logprobs([d.tokens for d in datums], reference=False, temperature=1.0)
    assert rows_close(result.logprobs, expected)
    assert result.num_tokens == 8 + 7 + 6 and s.pending_datums == 3
    assert {"clip_fraction", "ratio/mean", "entropy", "logprob_gap/mean"} <= result.metrics.keys()


def test_clip_fraction_is_zero_on_policy_and_one_far_off_policy() -> None:
    s = session()
    datums = rl_datums(count=2, length=10)
    current = s.compute_logprobs([d.tokens for d in datums], reference=False, temperature=1.0)
    on_policy = [Datum(tokens=d.tokens, loss_mask=d.loss_mask, advantages=d.advantages,
                       sampling_logprobs=tuple(row)) for d, row in zip(datums, current)]
    metrics = s.forward_backward(on_policy, PPO).metrics
    assert metrics["clip_fraction"] == 0 and metrics["ratio/mean"] == pytest.approx(1.0, abs=1e-5)
    stale = [Datum(tokens=d.tokens, loss_mask=d.loss_mask, advantages=(1.0,) * len(d.tokens),
                   sampling_logprobs=tuple(x - 1.0 for x in row)) for d, row in zip(datums, current)]
    metrics = s.forward_backward(stale, PPO).metrics  # ratio e > 1.28 with A > 0: all clipped
    assert metrics["clip_fraction"] == 1.0 and metrics["ratio/mean"] == pytest.approx(2.71828, rel=1e-4)


def test_optim_step_needs_gradients_and_honours_a_learning_rate_override() -> None:
    s = session(lr=1e-3)
    with pytest.raises(NoGradientsError, match="call ForwardBackward first"):
        s.optim_step()
    s.forward_backward(sft_datums()[:2], CE)
    result = s.optim_step(learning_rate=0.5)
    assert (result.step, result.policy_version, result.learning_rate) == (1, 1, 0.5)
    assert result.grad_norm > 0 and result.metrics["datums"] == 2
    s.forward_backward(sft_datums()[:2], CE)
    assert s.optim_step().learning_rate == pytest.approx(1e-3)
    with pytest.raises(NoGradientsError):
        s.optim_step()
    with pytest.raises(ValidationError, match="learning_rate"):
        s.optim_step(learning_rate=-1.0)


def test_gradient_clipping_bounds_the_update() -> None:
    s = session(lr=1e-2)
    s.forward_backward(rl_datums(), LossConfig(function=LossFunction.POLICY_GRADIENT))
    before = {n: p.grad.clone() for n, p in s.model.named_parameters()}
    raw_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in before.values()]))
    assert s.optim_step().grad_norm == pytest.approx(float(raw_norm), rel=1e-4)


def test_lora_reference_is_the_base_and_kl_starts_at_zero() -> None:
    s = session(lora=LoraSpec(rank=4, alpha=8), lr=5e-2)
    tokens = [d.tokens for d in rl_datums(count=2)]
    assert rows_close(s.compute_logprobs(tokens, reference=True, temperature=1.0),
                      s.compute_logprobs(tokens, reference=False, temperature=1.0), atol=1e-6)
    assert s.forward_backward(rl_datums(count=2), PPO_KL).metrics["kl"] == pytest.approx(0.0, abs=1e-7)
    s.optim_step()
    policy = s.compute_logprobs(tokens, reference=False, temperature=1.0)
    reference = s.compute_logprobs(tokens, reference=True, temperature=1.0)
    assert not rows_close(policy, reference, atol=1e-4)
    assert s.forward_backward(rl_datums(count=2), PPO_KL).metrics["kl"] > 0


def test_full_session_reference_needs_keep_reference_or_datum_reference_logprobs() -> None:
    plain = session()
    with pytest.raises(NoReferenceError, match="keep_reference"):
        plain.forward_backward(rl_datums(count=2), PPO_KL)
    with pytest.raises(NoReferenceError):
        plain.compute_logprobs([(1, 2, 3)], reference=True, temperature=1.0)
    given = [Datum(tokens=d.tokens, loss_mask=d.loss_mask, advantages=d.advantages,
                   sampling_logprobs=d.sampling_logprobs, reference_logprobs=(-5.0,) * len(d.tokens))
             for d in rl_datums(count=2)]
    assert plain.forward_backward(given, PPO_KL).metrics["kl"] != 0
    kept = session(keep_reference=True)
    assert kept.forward_backward(rl_datums(count=2), PPO_KL).metrics["kl"] == pytest.approx(0.0, abs=1e-7)
    assert not any(p.requires_grad for p in kept.reference_model.parameters())


def test_temperature_scales_the_logprobs() -> None:
    s = session()
    tokens = [d.tokens for d in rl_datums(count=1)]
    hot = s.compute_logprobs(tokens, reference=False, temperature=2.0)[0]
    cold = s.compute_logprobs(tokens, reference=False, temperature=1.0)[0]
    assert hot[0] == cold[0] == 0 and hot[1:] != pytest.approx(cold[1:])
    with pytest.raises(ValidationError, match="temperature"):
        s.compute_logprobs(tokens, reference=False, temperature=0.0)


def test_kl_as_reward_equals_policy_gradient_on_hand_shaped_advantages() -> None:
    """KL_PLACEMENT_REWARD: the same loss and gradients as plain PG whose advantages carry
    -kl_coef * (reward-to-go of k1(sampling || reference)), computed here by hand."""
    kl_reward = LossConfig(function=LossFunction.POLICY_GRADIENT, kl_coef=0.5,
                           kl_estimator=KlEstimator.K1, kl_placement=KlPlacement.REWARD)
    datums = rl_datums(count=2, length=6, old_shift=1.0)
    shaped_session, plain_session = session(lora=LoraSpec(rank=4, alpha=8)), \
        session(lora=LoraSpec(rank=4, alpha=8))
    reference = shaped_session.compute_logprobs([d.tokens for d in datums], reference=True,
                                                temperature=1.0)
    by_hand = []
    for datum, ref in zip(datums, reference):
        mask = (0.0,) + datum.loss_mask[1:]
        penalties = [m * (old - r) for m, old, r in zip(mask, datum.sampling_logprobs, ref)]
        to_go = [sum(penalties[t:]) for t in range(len(penalties))]
        by_hand.append(Datum(tokens=datum.tokens, loss_mask=datum.loss_mask,
                             advantages=tuple(a - 0.5 * g for a, g in zip(datum.advantages, to_go))))
    shaped = shaped_session.forward_backward(datums, kl_reward)
    plain = plain_session.forward_backward(by_hand, LossConfig(function=LossFunction.POLICY_GRADIENT))
    assert shaped.loss == pytest.approx(plain.loss, rel=1e-5) and abs(plain.loss) > 0.1
    assert shaped.metrics["kl_reward/kl"] > 0.5  # sampling logprobs -4.5, the reference's ~-5.5
    for a, b in zip(shaped_session.trainable_parameters(), plain_session.trainable_parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_kl_as_reward_refusals() -> None:
    with pytest.raises(ValidationError, match="cross-entropy has none"):
        LossConfig(function=LossFunction.CROSS_ENTROPY, kl_coef=0.1, kl_placement=KlPlacement.REWARD)
    kl_reward = LossConfig(function=LossFunction.POLICY_GRADIENT, kl_coef=0.1,
                           kl_placement=KlPlacement.REWARD)
    no_sampling = [Datum(tokens=d.tokens, loss_mask=d.loss_mask, advantages=d.advantages)
                   for d in rl_datums(count=1)]
    with pytest.raises(ValidationError, match=r"sampling_logprobs.*KL_PLACEMENT_REWARD needs it"):
        session(lora=LoraSpec(rank=4, alpha=8)).forward_backward(no_sampling, kl_reward)
    with pytest.raises(NoReferenceError, match="KL_PLACEMENT_REWARD"):
        session().forward_backward(rl_datums(count=1), kl_reward)


def storage_bytes(*models) -> int:
    """Bytes of the distinct tensor storages the models hold (shared storage counted once)."""
    storages = {}
    for model in (m for m in models if m is not None):
        for tensor in [*model.parameters(), *model.buffers()]:
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    return sum(storages.values())


def test_the_lora_reference_costs_no_memory_and_a_full_reference_a_whole_model() -> None:
    base_bytes = storage_bytes(build_builtin(MODEL, 0))
    lora = session(lora=LoraSpec(rank=4, alpha=8))
    adapter_bytes = sum(p.numel() * p.element_size() for p in lora.trainable_parameters())
    assert 0 < adapter_bytes < base_bytes / 5
    assert storage_bytes(lora.model, lora.reference_model) == base_bytes + adapter_bytes
    kept = session(keep_reference=True)
    assert storage_bytes(kept.model, kept.reference_model) == 2 * base_bytes
