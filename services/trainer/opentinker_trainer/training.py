"""One ForwardBackward: micro-batches, loss terms, backward, metrics. `batch_norm` fixes the
whole batch's denominators, `accumulate` runs one shard of it (all of it on one device, a
rank's share when data-parallel), `combine` merges the shards' results. Gradients accumulate
in the model's parameters until the session's optimizer step."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from opentinker.ml.logprobs import entropy_from_logits, forward_logits, logprobs_from_logits
from opentinker_trainer import losses
from opentinker_trainer.batching import Batch, Datum, datum_loss_mask, pad_batch, plan_micro_batches
from opentinker_trainer.config import LossConfig, LossFunction

# (tokens_B_T, attention_mask_B_T, temperature) -> reference logprobs_B_T
ReferenceFn = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]


@dataclass(frozen=True, kw_only=True)
class ForwardBackwardResult:
    """The batch loss, token-weighted metrics and each datum's logprobs (before the step)."""

    loss: float
    metrics: dict[str, float]
    num_tokens: int
    logprobs: list[list[float]]


@dataclass
class MetricSums:
    """Masked sums and their token counts, merged over micro-batches (and ranks) into means."""

    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counts: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, name: str, values_B_T: torch.Tensor, mask_B_T: torch.Tensor) -> None:
        self.sums[name] += float((values_B_T.detach().float() * mask_B_T).sum())
        self.counts[name] += float(mask_B_T.sum())

    def merge(self, other: MetricSums) -> None:
        for name in other.sums:
            self.sums[name] += other.sums[name]
            self.counts[name] += other.counts[name]

    def means(self) -> dict[str, float]:
        return {name: self.sums[name] / self.counts[name]
                for name in self.sums if self.counts[name] > 0}


@dataclass(frozen=True, kw_only=True)
class ShardResult:
    """What accumulating a subset of a batch gives: its share of the loss, metric sums and
    the logprobs of its datums (in the order they were given)."""

    loss: float
    metrics: MetricSums
    logprobs: list[list[float]]


def batch_norm(datums: Sequence[Datum], loss: LossConfig) -> losses.LossNorm:
    """The denominators of the whole batch, which every micro-batch and rank divides by."""
    return losses.loss_norm([datum_loss_mask(d) for d in datums], loss.token_sum_divisor)


def accumulate(model: Any, datums: Sequence[Datum], loss: LossConfig, norm: losses.LossNorm, *,
               max_tokens: int, reference: ReferenceFn | None,
               device: str | torch.device = "cpu") -> ShardResult:
    """Backward of `datums`' share of a batch whose denominators are `norm`."""
    metrics = MetricSums()
    logprobs: list[list[float]] = [[] for _ in datums]
    total = 0.0
    for indices in plan_micro_batches([len(d.tokens) for d in datums], max_tokens):
        batch = pad_batch([datums[i] for i in indices], device)
        value, logprobs_B_T = _micro_batch(model, batch, loss, norm, reference, metrics)
        total += value
        for row, index in enumerate(indices):
            logprobs[index] = logprobs_B_T[row, :batch.lengths[row]].tolist()
    return ShardResult(loss=total, metrics=metrics, logprobs=logprobs)


def combine(datums: Sequence[Datum],
            shards: Sequence[tuple[Sequence[int], ShardResult]]) -> ForwardBackwardResult:
    """One result from shards, each (the datum indices it held, what it gave)."""
    metrics = MetricSums()
    logprobs: list[list[float]] = [[] for _ in datums]
    for indices, shard in shards:
        metrics.merge(shard.metrics)
        for index, row in zip(indices, shard.logprobs):
            logprobs[index] = row
    num_tokens = int(sum(float((datum_loss_mask(d) > 0).sum()) for d in datums))
    summary = {**metrics.means(), "num_sequences": float(len(datums))}
    return ForwardBackwardResult(loss=sum(shard.loss for _, shard in shards), metrics=summary,
                                 num_tokens=num_tokens, logprobs=logprobs)


def _micro_batch(model: Any, batch: Batch, loss: LossConfig, norm: losses.LossNorm,
                 reference: ReferenceFn | None, metrics: MetricSums) -> tuple[float, torch.Tensor]:
    """Backward of this micro-batch's share of the loss; (its value, its logprobs_B_T)."""
    reference_B_T = _reference_logprobs(batch, loss, reference)
    if loss.kl_in_reward:
        batch = _with_kl_reward(batch, reference_B_T, loss, metrics)
        reference_B_T = None
    logits_B_T_V = forward_logits(model, batch.tokens_B_T, batch.attention_mask_B_T)
    logprobs_B_T = logprobs_from_logits(logits_B_T_V, batch.tokens_B_T, batch.attention_mask_B_T,
                                        loss.temperature)
    entropy_B_T = entropy_from_logits(logits_B_T_V, batch.attention_mask_B_T, loss.temperature)
    if loss.entropy_coef == 0:
        entropy_B_T = entropy_B_T.detach()
    objective = _objective(logprobs_B_T, entropy_B_T, reference_B_T, batch, loss, norm, metrics)
    objective.backward()
    return float(objective.detach()), logprobs_B_T.detach()


def _objective(logprobs_B_T: torch.Tensor, entropy_B_T: torch.Tensor,
               reference_B_T: torch.Tensor | None, batch: Batch, loss: LossConfig,
               norm: losses.LossNorm, metrics: MetricSums) -> torch.Tensor:
    """Policy term + kl_coef * KL - entropy_coef * entropy, each aggregated; records metrics."""
    mask_B_T = batch.loss_mask_B_T
    trained_B_T = (mask_B_T > 0).float()
    policy = policy_loss(logprobs_B_T, batch, loss)
    objective = losses.aggregate(policy.loss_B_T, mask_B_T, loss.aggregation, norm)
    if reference_B_T is not None:
        kl_B_T = losses.kl_penalty(logprobs_B_T, reference_B_T, loss.kl_estimator)
        objective = objective + loss.kl_coef * losses.aggregate(kl_B_T, mask_B_T, loss.aggregation, norm)
        metrics.add("kl", kl_B_T, trained_B_T)
    if loss.entropy_coef:
        objective = objective - loss.entropy_coef * losses.aggregate(
            entropy_B_T, mask_B_T, loss.aggregation, norm)
    _record_metrics(metrics, policy, logprobs_B_T, entropy_B_T, batch, trained_B_T)
    return objective


def policy_loss(logprobs_B_T: torch.Tensor, batch: Batch, loss: LossConfig) -> losses.PolicyLoss:
    """The per-token policy term of `loss.function`."""
    old_B_T, advantages_B_T = batch.sampling_logprobs_B_T, batch.advantages_B_T
    match loss.function:
        case LossFunction.CROSS_ENTROPY:
            return losses.PolicyLoss(losses.cross_entropy(logprobs_B_T))
        case LossFunction.POLICY_GRADIENT:
            return losses.policy_gradient(logprobs_B_T, advantages_B_T)
        case LossFunction.PPO_CLIP:
            return losses.ppo_clip(logprobs_B_T, old_B_T, advantages_B_T, loss.clip_low, loss.clip_high)
        case LossFunction.DUAL_CLIP:
            return losses.dual_clip(logprobs_B_T, old_B_T, advantages_B_T, loss.clip_low,
                                    loss.clip_high, loss.dual_clip_c)
        case LossFunction.TRUNCATED_IS:
            return losses.truncated_is(logprobs_B_T, old_B_T, advantages_B_T, loss.truncation_cap)
        case LossFunction.GSPO:
            return losses.gspo(logprobs_B_T, old_B_T, advantages_B_T, batch.loss_mask_B_T,
                               loss.clip_low, loss.clip_high)
    raise AssertionError(f"unhandled loss function {loss.function}")


def _record_metrics(metrics: MetricSums, policy: losses.PolicyLoss, logprobs_B_T: torch.Tensor,
                    entropy_B_T: torch.Tensor, batch: Batch, trained_B_T: torch.Tensor) -> None:
    metrics.add("entropy", entropy_B_T, trained_B_T)
    metrics.add("logprob/mean", logprobs_B_T, trained_B_T)
    if policy.ratio_B_T is not None:
        metrics.add("ratio/mean", policy.ratio_B_T, trained_B_T)
        metrics.add("clip_fraction", policy.clipped_B_T.float(), trained_B_T)
    if batch.has_sampling_logprobs:
        gap_B_T = (logprobs_B_T - batch.sampling_logprobs_B_T).abs()
        metrics.add("logprob_gap/mean", gap_B_T, trained_B_T)


def _with_kl_reward(batch: Batch, reference_B_T: torch.Tensor, loss: LossConfig,
                    metrics: MetricSums) -> Batch:
    """The batch with its advantages shaped by the KL reward (`losses.kl_reward_advantages`).

    The KL is that of the behaviour policy that sampled the tokens (the sampling logprobs), so
    the reward is fixed data, as an environment reward is.
    """
    if not batch.has_sampling_logprobs:
        raise AssertionError("the session checks that KL_PLACEMENT_REWARD datums carry "
                             "sampling logprobs")
    kl_B_T = losses.kl_penalty(batch.sampling_logprobs_B_T, reference_B_T, loss.kl_estimator)
    metrics.add("kl_reward/kl", kl_B_T, (batch.loss_mask_B_T > 0).float())
    shaped_B_T = losses.kl_reward_advantages(batch.advantages_B_T, kl_B_T, batch.loss_mask_B_T,
                                             loss.kl_coef)
    return dataclasses.replace(batch, advantages_B_T=shaped_B_T)


def _reference_logprobs(batch: Batch, loss: LossConfig,
                        reference: ReferenceFn | None) -> torch.Tensor | None:
    """The batch's reference logprobs when the loss has a KL term, else None."""
    if not loss.needs_reference:
        return None
    if batch.reference_logprobs_B_T is not None:
        return batch.reference_logprobs_B_T
    if reference is None:
        raise AssertionError("the session checks that a reference exists before calling")
    with torch.no_grad():
        return reference(batch.tokens_B_T, batch.attention_mask_B_T, loss.temperature)
