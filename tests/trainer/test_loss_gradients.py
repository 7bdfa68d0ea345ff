"""Each loss's gradient against its closed form on tiny tensors, a double-precision gradcheck
of each, the entropy bonus, Dr.GRPO vs sequence-mean weighting, and KL as a reward."""

from __future__ import annotations

import math

import pytest
import torch

from opentinker_runtime.ml.logprobs import entropy_from_logits
from opentinker_trainer import losses
from opentinker_trainer.config import KlEstimator, LossAggregation

# Three trained tokens of one sequence, ratios p/p_old = 1.0, 1.5, 0.5.
LOGP = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.3)]])
OLD = torch.tensor([[math.log(0.5), math.log(0.6), math.log(0.6)]])
RATIO = torch.tensor([[1.0, 1.5, 0.5]])
ONES = torch.ones(1, 3)
NORM3 = losses.LossNorm(total_weight=3.0, num_sequences=1, token_divisor=3.0)
MEAN = LossAggregation.TOKEN_MEAN


def grad_of(per_token, advantages: torch.Tensor, norm: losses.LossNorm = NORM3,
            aggregation: LossAggregation = MEAN, mask: torch.Tensor = ONES) -> torch.Tensor:
    """d(aggregate(per_token(logp, A)))/d logp at LOGP."""
    logp = LOGP.clone().requires_grad_(True)
    losses.aggregate(per_token(logp, advantages), mask, aggregation, norm).backward()
    return logp.grad


def test_cross_entropy_gradient_is_minus_mask_over_weight() -> None:
    mask = torch.tensor([[1.0, 0.5, 0.0]])
    norm = losses.LossNorm(total_weight=1.5, num_sequences=1, token_divisor=3.0)
    grad = grad_of(lambda x, _: losses.cross_entropy(x), ONES, norm, mask=mask)
    assert torch.allclose(grad, -mask / 1.5)


def test_dual_clip_gradient_is_zero_where_capped_and_ppo_elsewhere() -> None:
    advantages = torch.tensor([[-1.0, -1.0, 1.0]])
    # token 0: A<0, r=1 -> unclipped, -A*r = 1 < cap 3: gradient -A*r/3 = 1/3.
    # token 1: A<0, r=1.5 -> ppo loss 1.5 < 3: unclipped gradient -A*r/3 = 0.5.
    # token 2: A>0, r=0.5 -> -A*r = -0.5 > -A*0.8: unclipped, gradient -A*r/3 = -1/6.
    grad = grad_of(lambda x, a: losses.dual_clip(x, OLD, a, 0.2, 0.2, c=3.0).loss_B_T, advantages)
    assert torch.allclose(grad, torch.tensor([[1 / 3, 0.5, -1 / 6]]))
    # With c = 1.2 the negative-advantage tokens are capped at 1.2: loss 1.2 is constant.
    capped = grad_of(lambda x, a: losses.dual_clip(x, OLD, a, 0.6, 0.6, c=1.2).loss_B_T, advantages)
    assert torch.allclose(capped, torch.tensor([[1 / 3, 0.0, -1 / 6]]))


def test_truncated_is_gradient_is_the_capped_ratio_times_advantage() -> None:
    advantages = torch.tensor([[1.0, 2.0, -1.0]])
    grad = grad_of(lambda x, a: losses.truncated_is(x, OLD, a, cap=1.2).loss_B_T, advantages)
    expected = -torch.minimum(RATIO, torch.tensor(1.2)) * advantages / 3
    assert torch.allclose(grad, expected)


def test_gspo_gradient_spreads_the_sequence_ratio_over_its_tokens() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    advantages = torch.full((1, 3), 2.0)
    norm = losses.LossNorm(total_weight=2.0, num_sequences=1, token_divisor=3.0)
    s = math.sqrt(1.5 * 0.5)
    grad = grad_of(lambda x, a: losses.gspo(x, OLD, a, mask, 0.5, 0.5).loss_B_T, advantages,
                   norm, mask=mask)
    # loss = mean over 2 tokens of -A*s = -A*s; ds/dlogp_t = s * m_t / 2.
    assert torch.allclose(grad, torch.tensor([[0.0, -2 * s / 2, -2 * s / 2]]))
    clipped = grad_of(lambda x, a: losses.gspo(x, OLD, a, mask, 0.05, 0.05).loss_B_T, -advantages,
                      norm, mask=mask)
    assert torch.allclose(clipped, torch.zeros(1, 3))  # s = 0.87 < 0.95 with A < 0: clipped


@pytest.mark.parametrize(("estimator", "expected"), [
    (KlEstimator.K1, lambda p, q: torch.ones_like(p)),  # d/dlogp log(p/q) = 1
    (KlEstimator.K3, lambda p, q: 1 - q / p),           # d/dlogp (q/p - 1 - log(q/p))
])
def test_kl_gradients(estimator, expected) -> None:
    reference = torch.tensor([[math.log(0.25), math.log(0.9), math.log(0.6)]])
    grad = grad_of(lambda x, _: losses.kl_penalty(x, reference, estimator), ONES,
                   losses.LossNorm(total_weight=1.0, num_sequences=1, token_divisor=1.0))
    assert torch.allclose(grad, expected(LOGP.exp(), reference.exp()), atol=1e-6)


def test_entropy_bonus_value_and_gradient() -> None:
    """H = -sum p log p; dH/dz_i = -p_i (log p_i + H) for the logits z of one position."""
    logits = torch.tensor([[[math.log(0.5), math.log(0.25), math.log(0.25)], [0.0, 0.0, 0.0]]],
                          requires_grad=True)
    entropy = entropy_from_logits(logits, torch.ones(1, 2))
    h = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert torch.allclose(entropy, torch.tensor([[0.0, h]]))  # index 0 predicts nothing
    entropy.sum().backward()
    p = torch.tensor([0.5, 0.25, 0.25])
    assert torch.allclose(logits.grad[0, 0], -p * (p.log() + h), atol=1e-6)
    assert torch.allclose(logits.grad[0, 1], torch.zeros(3))  # the last position predicts nothing
    # At temperature 2 the uniform row stays uniform: entropy log 3.
    flat = entropy_from_logits(torch.zeros(1, 2, 3), torch.ones(1, 2), temperature=2.0)
    assert flat[0, 1].item() == pytest.approx(math.log(3))


def test_dr_grpo_token_sum_weights_every_token_alike_unlike_sequence_mean() -> None:
    """Two sequences with 1 and 3 trained tokens, advantage 1 everywhere (PG loss)."""
    logp = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-1.0, -1.0, -1.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
    norm = losses.loss_norm(list(mask), token_divisor=0.0)  # divisor = longest = 4
    advantages = torch.ones(2, 4)

    def gradient(aggregation: LossAggregation) -> torch.Tensor:
        logp.grad = None
        losses.aggregate(losses.policy_gradient(logp, advantages).loss_B_T, mask, aggregation,
                         norm).backward()
        return logp.grad.clone()

    # sequence mean: 1/(L_b * N): the lone token of the short sequence weighs 3x the others.
    assert torch.allclose(gradient(LossAggregation.SEQUENCE_MEAN),
                          -mask * torch.tensor([[1 / 2], [1 / 6]]))
    # Dr.GRPO token sum / (D * N): every token weighs 1/(4 * 2), whatever its sequence's length.
    assert torch.allclose(gradient(LossAggregation.TOKEN_SUM_NORM), -mask / 8)
    assert torch.allclose(gradient(LossAggregation.TOKEN_MEAN), -mask / 4)


def test_kl_reward_shapes_advantages_by_the_reward_to_go_of_the_penalties() -> None:
    advantages = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    kl = torch.tensor([[9.0, 0.5, 0.25, 1.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 0.0, 1.0]])  # token 2 is an observation: no penalty
    shaped = losses.kl_reward_advantages(advantages, kl, mask, coef=0.1)
    # A'_t = A_t - 0.1 * sum_{s >= t} m_s kl_s: tails 1.5, 1.5, 1.0, 1.0
    assert torch.allclose(shaped, torch.tensor([[-0.15, 0.85, 0.9, 0.9]]))
    assert not shaped.requires_grad  # a reward, not a differentiable term


POLICY_LOSSES = {
    "cross_entropy": lambda x, old, a, m: losses.cross_entropy(x),
    "policy_gradient": lambda x, old, a, m: losses.policy_gradient(x, a).loss_B_T,
    "ppo_clip": lambda x, old, a, m: losses.ppo_clip(x, old, a, 0.5, 0.5).loss_B_T,
    "dual_clip": lambda x, old, a, m: losses.dual_clip(x, old, a, 0.2, 0.2, 1.1).loss_B_T,
    "gspo": lambda x, old, a, m: losses.gspo(x, old, a, m, 0.5, 0.5).loss_B_T,
    "kl_k1": lambda x, old, a, m: losses.kl_penalty(x, old, KlEstimator.K1),
    "kl_k3": lambda x, old, a, m: losses.kl_penalty(x, old, KlEstimator.K3),
}


@pytest.mark.parametrize("aggregation", list(LossAggregation))
@pytest.mark.parametrize("name", list(POLICY_LOSSES))
def test_every_loss_passes_gradcheck_in_double_precision(name, aggregation) -> None:
    """Finite differences agree with autograd (points chosen away from the clip kinks).

    Truncated IS is left out on purpose: its weight min(r, cap) is stopped, so its gradient is
    not that of its value (the closed-form test above covers it)."""
    logp = torch.tensor([[-0.7, -0.1, -1.2, -2.0], [-0.3, -0.9, -0.4, -1.0]],
                        dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-0.6, -0.3, -1.0, -2.5], [-0.3, -0.5, -0.45, -1.3]], dtype=torch.float64)
    advantages = torch.tensor([[1.0, -0.5, 2.0, -1.0], [-1.0, 1.0, 0.5, -2.0]], dtype=torch.float64)
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.5, 0.0]], dtype=torch.float64)
    norm = losses.loss_norm(list(mask), 0.0)
    per_token = POLICY_LOSSES[name]

    def objective(x: torch.Tensor) -> torch.Tensor:
        return losses.aggregate(per_token(x, old, advantages, mask), mask, aggregation, norm)

    assert torch.autograd.gradcheck(objective, (logp,))
