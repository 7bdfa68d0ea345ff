"""Loss terms against hand-computed values, and gradients against closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from opentinker_trainer import losses
from opentinker_trainer.config import KlEstimator, LossAggregation

LOGP = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.3)]])
OLD = torch.tensor([[math.log(0.5), math.log(0.6), math.log(0.6)]])  # ratios 1.0, 1.5, 0.5
ADV = torch.tensor([[1.0, 1.0, -1.0]])
ONES = torch.ones(1, 3)
NORM3 = losses.LossNorm(total_weight=3.0, num_sequences=1, token_divisor=3.0)


def close(actual: torch.Tensor, expected: list[list[float]]) -> bool:
    return torch.allclose(actual.float(), torch.tensor(expected), atol=1e-5)


def test_cross_entropy_and_policy_gradient() -> None:
    assert close(losses.cross_entropy(LOGP), [[0.693147, 0.105361, 1.203973]])
    assert close(losses.policy_gradient(LOGP, ADV).loss_B_T, [[0.693147, 0.105361, -1.203973]])


def test_ppo_clip_values_and_clip_fraction() -> None:
    result = losses.ppo_clip(LOGP, OLD, ADV, clip_low=0.2, clip_high=0.2)
    assert close(result.ratio_B_T, [[1.0, 1.5, 0.5]])
    # A=1, r=1: -1. A=1, r=1.5: max(-1.5, -1.2) = -1.2 (clipped). A=-1, r=0.5: max(0.5, 0.8) = 0.8 (clipped).
    assert close(result.loss_B_T, [[-1.0, -1.2, 0.8]])
    assert result.clipped_B_T.tolist() == [[False, True, True]]
    asymmetric = losses.ppo_clip(LOGP, OLD, ADV, clip_low=0.6, clip_high=0.6)
    assert close(asymmetric.loss_B_T, [[-1.0, -1.5, 0.5]]) and not asymmetric.clipped_B_T.any()


def test_dual_clip_caps_the_loss_of_negative_advantages() -> None:
    logp = torch.tensor([[math.log(0.5), math.log(0.5)]])
    old = torch.tensor([[math.log(0.1), math.log(0.1)]])  # ratio 5
    adv = torch.tensor([[-1.0, 1.0]])
    result = losses.dual_clip(logp, old, adv, clip_low=0.2, clip_high=0.2, c=3.0)
    # A=-1: ppo = max(5, 1.2) = 5, capped at -A*c = 3. A=1: ppo = max(-5, -1.2) = -1.2.
    assert close(result.loss_B_T, [[3.0, -1.2]])
    assert result.clipped_B_T.tolist() == [[True, True]]


def test_truncated_is_weights_logp_by_the_capped_ratio() -> None:
    result = losses.truncated_is(LOGP, OLD, ADV, cap=1.2)
    assert close(result.loss_B_T, [[-math.log(0.5), -1.2 * math.log(0.9), 0.5 * math.log(0.3)]])
    assert result.clipped_B_T.tolist() == [[False, True, False]]


def test_gspo_uses_one_length_normalised_ratio_per_sequence() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    result = losses.gspo(LOGP, OLD, torch.ones(1, 3), mask, clip_low=0.2, clip_high=0.2)
    s = math.sqrt(1.5 * 0.5)  # exp(mean(log 1.5, log 0.5)) over the two masked tokens
    assert close(result.ratio_B_T, [[s, s, s]])
    assert close(result.loss_B_T, [[-s, -s, -s]]) and not result.clipped_B_T.any()


def test_kl_estimators() -> None:
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    assert close(losses.kl_penalty(logp, ref, KlEstimator.K1), [[math.log(2)]])
    assert close(losses.kl_penalty(logp, ref, KlEstimator.K3), [[0.5 - 1 - math.log(0.5)]])


@pytest.mark.parametrize("estimator", list(KlEstimator))
def test_kl_is_zero_with_zero_gradient_when_policy_is_the_reference(estimator) -> None:
    logp = LOGP.clone().requires_grad_(True)
    kl = losses.kl_penalty(logp, LOGP.clone(), estimator)
    assert torch.all(kl == 0)
    if estimator == KlEstimator.K3:
        kl.sum().backward()
        assert torch.allclose(logp.grad, torch.zeros_like(logp))


def test_aggregations() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    norm = losses.loss_norm(list(mask), token_divisor=0.0)
    assert norm == losses.LossNorm(total_weight=3.0, num_sequences=2, token_divisor=3.0)

    def reduced(aggregation: LossAggregation, by: losses.LossNorm = norm) -> float:
        return losses.aggregate(values, mask, aggregation, by).item()

    assert reduced(LossAggregation.TOKEN_MEAN) == pytest.approx(10 / 3)  # (2 + 3 + 5) / 3
    assert reduced(LossAggregation.SEQUENCE_MEAN) == pytest.approx(3.75)  # (2.5 + 5) / 2
    assert reduced(LossAggregation.TOKEN_SUM_NORM) == pytest.approx(10 / 6)  # 10 / (3 * 2)
    fixed = losses.loss_norm(list(mask), token_divisor=10.0)
    assert reduced(LossAggregation.TOKEN_SUM_NORM, fixed) == pytest.approx(0.5)


@pytest.mark.parametrize("aggregation", list(LossAggregation))
def test_micro_batch_aggregates_sum_to_the_batch_aggregate(aggregation) -> None:
    values = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 1, 1, 1, 1.0]])
    norm = losses.loss_norm(list(mask), 0.0)
    whole = losses.aggregate(values, mask, aggregation, norm)
    parts = losses.aggregate(values[:1], mask[:1], aggregation, norm) + \
        losses.aggregate(values[1:], mask[1:], aggregation, norm)
    assert torch.allclose(whole, parts)


def test_policy_gradient_token_mean_gradient_is_minus_a_m_over_w() -> None:
    logp = LOGP.clone().requires_grad_(True)
    mask = torch.tensor([[1.0, 0.5, 1.0]])
    norm = losses.LossNorm(total_weight=2.5, num_sequences=1, token_divisor=3.0)
    losses.aggregate(losses.policy_gradient(logp, ADV).loss_B_T, mask, LossAggregation.TOKEN_MEAN,
                     norm).backward()
    assert torch.allclose(logp.grad, -ADV * mask / 2.5)


def test_ppo_gradient_is_minus_a_r_over_w_where_unclipped_and_zero_where_clipped() -> None:
    logp = LOGP.clone().requires_grad_(True)
    result = losses.ppo_clip(logp, OLD, ADV, clip_low=0.2, clip_high=0.2)
    losses.aggregate(result.loss_B_T, ONES, LossAggregation.TOKEN_MEAN, NORM3).backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1.0 * 1.0 / 3, 0.0, 0.0]]))


def test_losses_pass_gradcheck_in_double_precision() -> None:
    logp = torch.tensor([[-0.7, -0.1, -1.2, -2.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-0.6, -0.3, -1.0, -2.5]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -0.5, 2.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    norm = losses.loss_norm(list(mask), 0.0)

    def objective(x: torch.Tensor) -> torch.Tensor:
        ppo = losses.ppo_clip(x, old, adv, clip_low=0.5, clip_high=0.5).loss_B_T
        kl = losses.kl_penalty(x, old, KlEstimator.K3)
        return losses.aggregate(ppo + 0.1 * kl, mask, LossAggregation.SEQUENCE_MEAN, norm)

    assert torch.autograd.gradcheck(objective, (logp,))
