"""Loss terms as pure functions over per-token tensors.

Shapes: B sequences, T tokens. Every per-token tensor follows the datum convention: index t
describes predicting tokens[t] from tokens[:t]. `mask_B_T` holds the loss-mask weights (0 on
prompt, observation and padding tokens). Per-token functions return unreduced `*_B_T`
tensors; `aggregate` reduces them with batch-wide denominators (`LossNorm`), so summing the
aggregates of micro-batches gives exactly the aggregate of the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from opentinker_trainer.config import ImportanceMask, KlEstimator, LossAggregation

LOG_RATIO_LIMIT = 20.0  # |log ratio| is clamped before exp() so one outlier cannot overflow


class PolicyLoss(NamedTuple):
    """Per-token policy loss, the importance ratio and where clipping was active."""

    loss_B_T: torch.Tensor
    ratio_B_T: torch.Tensor | None = None
    clipped_B_T: torch.Tensor | None = None


@dataclass(frozen=True, kw_only=True)
class LossNorm:
    """Denominators of the whole batch (not of one micro-batch).

    total_weight: sum of the loss mask; num_sequences: sequences with any loss weight;
    token_divisor: the TOKEN_SUM_NORM constant.
    """

    total_weight: float
    num_sequences: int
    token_divisor: float


def cross_entropy(logprobs_B_T: torch.Tensor) -> torch.Tensor:
    """loss_B_T = -log p(token)."""
    return -logprobs_B_T


def policy_gradient(logprobs_B_T: torch.Tensor, advantages_B_T: torch.Tensor) -> PolicyLoss:
    """REINFORCE: loss_B_T = -A * log p."""
    return PolicyLoss(-advantages_B_T * logprobs_B_T)


def importance_ratio(logprobs_B_T: torch.Tensor, sampling_logprobs_B_T: torch.Tensor) -> torch.Tensor:
    """ratio_B_T = p / p_sampling, from logprobs (log ratio clamped to +-20)."""
    log_ratio_B_T = (logprobs_B_T - sampling_logprobs_B_T).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return log_ratio_B_T.exp()


def importance_keep(logprobs_B_T: torch.Tensor, sampling_logprobs_B_T: torch.Tensor,
                    mask_B_T: torch.Tensor, mode: ImportanceMask, low: float,
                    high: float) -> torch.Tensor:
    """keep_B_T: 0 where masked importance sampling drops a trained token, 1 elsewhere
    (untrained tokens included). Computed without gradient.

    TOKEN drops each token whose ratio r_t leaves [low, high]; SEQUENCE drops every trained
    token of a sequence whose geometric-mean ratio exp(sum_t m_t log r_t / sum_t m_t) leaves it.
    """
    with torch.no_grad():
        log_ratio_B_T = (logprobs_B_T - sampling_logprobs_B_T).clamp(-LOG_RATIO_LIMIT,
                                                                      LOG_RATIO_LIMIT)
        if mode == ImportanceMask.SEQUENCE:
            lengths_B_1 = mask_B_T.sum(-1, keepdim=True).clamp(min=1e-8)
            log_ratio_B_T = ((log_ratio_B_T * mask_B_T).sum(-1, keepdim=True)
                             / lengths_B_1).expand_as(mask_B_T)
        ratio_B_T = log_ratio_B_T.exp()
        in_band_B_T = (ratio_B_T >= low) & (ratio_B_T <= high)
        return (in_band_B_T | (mask_B_T <= 0)).to(mask_B_T.dtype)


def ppo_clip(logprobs_B_T: torch.Tensor, sampling_logprobs_B_T: torch.Tensor,
             advantages_B_T: torch.Tensor, clip_low: float, clip_high: float) -> PolicyLoss:
    """loss_B_T = max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high)); clipped where the
    clipped branch is strictly larger (its gradient is then 0)."""
    ratio_B_T = importance_ratio(logprobs_B_T, sampling_logprobs_B_T)
    unclipped_B_T = -advantages_B_T * ratio_B_T
    clipped_B_T = -advantages_B_T * ratio_B_T.clamp(1 - clip_low, 1 + clip_high)
    return PolicyLoss(torch.maximum(unclipped_B_T, clipped_B_T), ratio_B_T,
                      clipped_B_T > unclipped_B_T)


def dual_clip(logprobs_B_T: torch.Tensor, sampling_logprobs_B_T: torch.Tensor,
              advantages_B_T: torch.Tensor, clip_low: float, clip_high: float,
              c: float) -> PolicyLoss:
    """PPO clip, and for A < 0 the loss is also capped at -A * c (Ye et al. 2020)."""
    ppo = ppo_clip(logprobs_B_T, sampling_logprobs_B_T, advantages_B_T, clip_low, clip_high)
    cap_B_T = -advantages_B_T * c
    negative_B_T = advantages_B_T < 0
    loss_B_T = torch.where(negative_B_T, torch.minimum(ppo.loss_B_T, cap_B_T), ppo.loss_B_T)
    dual_clipped_B_T = negative_B_T & (cap_B_T < ppo.loss_B_T)
    return PolicyLoss(loss_B_T, ppo.ratio_B_T, ppo.clipped_B_T | dual_clipped_B_T)


def truncated_is(logprobs_B_T: torch.Tensor, sampling_logprobs_B_T: torch.Tensor,
                 advantages_B_T: torch.Tensor, cap: float) -> PolicyLoss:
    """loss_B_T = -stopgrad(min(r, cap)) * A * log p (truncated importance sampling)."""
    ratio_B_T = importance_ratio(logprobs_B_T, sampling_logprobs_B_T)
    weight_B_T = ratio_B_T.clamp(max=cap).detach()
    return PolicyLoss(-weight_B_T * advantages_B_T * logprobs_B_T, ratio_B_T, ratio_B_T > cap)


def gspo(logprobs_B_T: torch.Tensor, sampling_logprobs_B_T: torch.Tensor,
         advantages_B_T: torch.Tensor, mask_B_T: torch.Tensor, clip_low: float,
         clip_high: float) -> PolicyLoss:
    """GSPO: the PPO clip objective with one length-normalised ratio per sequence,
    s = exp(mean over masked tokens of log r), broadcast over the sequence's tokens."""
    log_ratio_B_T = (logprobs_B_T - sampling_logprobs_B_T) * mask_B_T
    lengths_B_1 = mask_B_T.sum(-1, keepdim=True).clamp(min=1e-8)
    log_s_B_1 = (log_ratio_B_T.sum(-1, keepdim=True) / lengths_B_1).clamp(-LOG_RATIO_LIMIT,
                                                                          LOG_RATIO_LIMIT)
    ratio_B_T = log_s_B_1.exp().expand_as(logprobs_B_T)
    unclipped_B_T = -advantages_B_T * ratio_B_T
    clipped_B_T = -advantages_B_T * ratio_B_T.clamp(1 - clip_low, 1 + clip_high)
    return PolicyLoss(torch.maximum(unclipped_B_T, clipped_B_T), ratio_B_T,
                      clipped_B_T > unclipped_B_T)


def importance_sampling(logprobs_B_T: torch.Tensor, sampling_logprobs_B_T: torch.Tensor,
                        advantages_B_T: torch.Tensor) -> PolicyLoss:
    """Tinker's importance_sampling: loss_B_T = -r * A, r not detached (gradient -r * A * grad
    log p) and never clipped (so no clip mask)."""
    return PolicyLoss(-importance_ratio(logprobs_B_T, sampling_logprobs_B_T) * advantages_B_T)


def cispo(logprobs_B_T: torch.Tensor, sampling_logprobs_B_T: torch.Tensor,
          advantages_B_T: torch.Tensor, clip_low: float, clip_high: float) -> PolicyLoss:
    """Tinker's cispo: loss_B_T = -stopgrad(clip(r, 1 - clip_low, 1 + clip_high)) * A * log p;
    clipped where r leaves the range."""
    ratio_B_T = importance_ratio(logprobs_B_T, sampling_logprobs_B_T)
    weight_B_T = ratio_B_T.clamp(1 - clip_low, 1 + clip_high).detach()
    clipped_B_T = (ratio_B_T < 1 - clip_low) | (ratio_B_T > 1 + clip_high)
    return PolicyLoss(-weight_B_T * advantages_B_T * logprobs_B_T, ratio_B_T, clipped_B_T)


def dro(logprobs_B_T: torch.Tensor, sampling_logprobs_B_T: torch.Tensor,
        advantages_B_T: torch.Tensor, beta: float) -> PolicyLoss:
    """Tinker's dro: loss_B_T = -(A * log p - 0.5 * beta * (log p - log p_sampling)^2)."""
    penalty_B_T = 0.5 * beta * (logprobs_B_T - sampling_logprobs_B_T).square()
    return PolicyLoss(-(advantages_B_T * logprobs_B_T - penalty_B_T))


def kl_penalty(logprobs_B_T: torch.Tensor, reference_logprobs_B_T: torch.Tensor,
               estimator: KlEstimator) -> torch.Tensor:
    """kl_B_T of the policy p from the reference q: k1 = log(p/q); k3 = (q/p - 1) - log(q/p)."""
    log_p_over_q_B_T = logprobs_B_T - reference_logprobs_B_T
    if estimator == KlEstimator.K1:
        return log_p_over_q_B_T
    log_q_over_p_B_T = (-log_p_over_q_B_T).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return log_q_over_p_B_T.exp() - 1 - log_q_over_p_B_T


def kl_reward_advantages(advantages_B_T: torch.Tensor, kl_B_T: torch.Tensor,
                         mask_B_T: torch.Tensor, coef: float) -> torch.Tensor:
    """KL as a reward: each trained token earns the reward -coef * kl_t, and a token's
    advantage gains the reward-to-go of those penalties (REINFORCE++'s token-level KL reward):

        A'_t = A_t - coef * sum_{s >= t} m_s * kl_s      (per sequence, no discount)

    kl_B_T is a reward, not a differentiable term: it is detached here.
    """
    penalty_B_T = (kl_B_T.detach() * mask_B_T).flip(-1).cumsum(-1).flip(-1)
    return advantages_B_T - coef * penalty_B_T


def aggregate(values_B_T: torch.Tensor, mask_B_T: torch.Tensor, aggregation: LossAggregation,
              norm: LossNorm) -> torch.Tensor:
    """Reduce per-token values to the scalar this micro-batch contributes to the batch loss.

    TOKEN_MEAN: sum(v * m) / total_weight.
    SEQUENCE_MEAN: sum over sequences of [sum_t(v * m) / sum_t(m)] / num_sequences.
    TOKEN_SUM_NORM: sum(v * m) / (token_divisor * num_sequences).
    SUM: sum(v * m), no denominator (`norm` unused).
    """
    weighted_B_T = values_B_T * mask_B_T
    if aggregation == LossAggregation.SUM:
        return weighted_B_T.sum()
    if aggregation == LossAggregation.TOKEN_MEAN:
        return weighted_B_T.sum() / max(norm.total_weight, 1e-8)
    sequences = max(norm.num_sequences, 1)
    if aggregation == LossAggregation.SEQUENCE_MEAN:
        per_sequence_B = weighted_B_T.sum(-1) / mask_B_T.sum(-1).clamp(min=1e-8)
        return per_sequence_B.sum() / sequences
    return weighted_B_T.sum() / (max(norm.token_divisor, 1e-8) * sequences)


def loss_norm(masks: list[torch.Tensor], token_divisor: float, longest: int = 0) -> LossNorm:
    """LossNorm of a batch from each datum's loss weights (mask_T tensors, index 0 already 0,
    tokens dropped by the importance mask already 0).

    token_divisor 0 = the longest sequence of the batch (`longest` when the masks are of
    datums cut after their shared prefix, else the longest mask).
    """
    weights = [float(mask_T.sum()) for mask_T in masks]
    longest = longest or max((len(mask_T) for mask_T in masks), default=1)
    return LossNorm(total_weight=sum(weights), num_sequences=sum(w > 0 for w in weights),
                    token_divisor=token_divisor or float(longest))
