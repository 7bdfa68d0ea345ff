"""One ForwardBackward: micro-batches, loss terms, backward, metrics. `batch_norm` fixes the
whole batch's denominators, `accumulate` runs one shard of it (all of it on one device, a
rank's share when data-parallel), `combine` merges the shards' results. Gradients accumulate
in the model's parameters until the session's optimizer step.

Masked importance sampling changes the denominators (a masked token counts in none), so they
are known only once the keep mask is: for a batch that is one micro-batch on one device the
micro-batch computes the mask and the denominators itself (`norm` None); otherwise the
session runs `importance.with_importance_keep` first and the datums carry their masks."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from opentinker_runtime.ml.logprobs import entropy_from_logits, forward_logits, logprobs_from_logits
from opentinker_trainer import losses, prefix_check, shared_prefix
from opentinker_trainer.batching import (Batch, Datum, datum_loss_mask, datum_loss_weights,
                                         pad_batch, plan_micro_batches)
from opentinker_trainer.config import LossConfig, LossFunction
from opentinker_trainer.memory import release_micro_batch_memory

PREFIX_SHARED = "prefix_shared_fraction"
"""Metric: the share of the datums' tokens the forward did not run again (shared prefixes)."""

CYCLE_SHARE_SECONDS = "cycle/share_seconds"
REPORTED_CYCLE_METRICS = frozenset({CYCLE_SHARE_SECONDS})
"""The figures of a cycle a ForwardBackward's caller hears of (`ForwardBackwardResult.reported_cycle`)."""

# (tokens_B_T, attention_mask_B_T, temperature) -> reference logprobs_B_T
ReferenceFn = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]


@dataclass(frozen=True, kw_only=True)
class ForwardBackwardResult:
    """The batch loss, token-weighted metrics and each datum's logprobs (before the step);
    `memory`: the call's peak memory and the micro-batch budget (`memory.PEAK_MEMORY`,
    `memory.MICRO_BATCH_TOKENS`), apart from `metrics`, which are the same from run to run."""

    loss: float
    metrics: dict[str, float]
    num_tokens: int
    logprobs: list[list[float]]
    memory: dict[str, float] = field(default_factory=dict)
    cycle: dict[str, float] = field(default_factory=dict)
    """Sessions on a shared base: the figures of the cycle the call ran in (`cycles`)."""

    @property
    def reported_cycle(self) -> dict[str, float]:
        """What the caller hears of the cycle: the call's share of its pass's time only. How many
        sessions shared the pass and their share of its tokens are other jobs' activity, often
        other tenants': they go to the Trainer's Prometheus metrics (an operator's), not here."""
        return {name: value for name, value in self.cycle.items() if name in REPORTED_CYCLE_METRICS}


@dataclass
class MetricSums:
    """Masked sums and their token counts, merged over micro-batches (and ranks) into means;
    masked maxima, merged into maxima."""

    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counts: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    maxima: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, values_B_T: torch.Tensor, mask_B_T: torch.Tensor) -> None:
        self.sums[name] += float((values_B_T.detach().float() * mask_B_T).sum())
        self.counts[name] += float(mask_B_T.sum())

    def add_count(self, name: str, part: float, whole: float) -> None:
        """A fraction over the batch: `part` of `whole` (summed over micro-batches and ranks)."""
        self.sums[name] += part
        self.counts[name] += whole

    def add_max(self, name: str, values_B_T: torch.Tensor, mask_B_T: torch.Tensor) -> None:
        """The largest value where mask_B_T > 0 (nothing when it is 0 everywhere)."""
        selected = values_B_T.detach().float()[mask_B_T > 0]
        if selected.numel():
            self._max(name, float(selected.max()))

    def merge(self, other: MetricSums) -> None:
        for name in other.sums:
            self.sums[name] += other.sums[name]
            self.counts[name] += other.counts[name]
        for name, value in other.maxima.items():
            self._max(name, value)

    def means(self) -> dict[str, float]:
        """Every mean and every maximum, by name."""
        means = {name: self.sums[name] / self.counts[name]
                 for name in self.sums if self.counts[name] > 0}
        return {**means, **self.maxima}

    def _max(self, name: str, value: float) -> None:
        self.maxima[name] = max(self.maxima.get(name, value), value)


@dataclass(frozen=True, kw_only=True)
class ShardResult:
    """What accumulating a subset of a batch gives: its share of the loss, metric sums and
    the logprobs of its datums (in the order they were given)."""

    loss: float
    metrics: MetricSums
    logprobs: list[list[float]]


def batch_norm(datums: Sequence[Datum], loss: LossConfig) -> losses.LossNorm:
    """The denominators of the whole batch, which every micro-batch and rank divides by
    (tokens the datums' importance keep drops count in none)."""
    return losses.loss_norm([datum_loss_weights(d) for d in datums], loss.token_sum_divisor)


def accumulate(model: Any, datums: Sequence[Datum], loss: LossConfig,
               norm: losses.LossNorm | None, *, max_tokens: int, reference: ReferenceFn | None,
               device: str | torch.device = "cpu") -> ShardResult:
    """Backward of `datums`' share of a batch whose denominators are `norm` (None: `datums`
    are the whole batch, one micro-batch, which computes its importance mask and norm)."""
    metrics = MetricSums()
    logprobs: list[list[float]] = [[] for _ in datums]
    total = 0.0
    plan = plan_micro_batches([len(d.tokens) for d in datums], max_tokens)
    if norm is None and len(plan) > 1:
        raise AssertionError("only a batch of one micro-batch computes its own norm")
    for number, indices in enumerate(plan):
        if number:
            release_micro_batch_memory(str(device))
        value, rows = _micro_batch(model, [datums[i] for i in indices], loss, norm, reference,
                                   metrics, device)
        total += value
        for index, row in zip(indices, rows):
            logprobs[index] = row
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


def _micro_batch(model: Any, datums: Sequence[Datum], loss: LossConfig,
                 norm: losses.LossNorm | None, reference: ReferenceFn | None, metrics: MetricSums,
                 device: str | torch.device) -> tuple[float, list[list[float]]]:
    """Backward of this micro-batch's share of the loss; (its value, each datum's logprobs).
    Datums sharing a prompt prefix run it once (`shared_prefix`) unless the model fails the
    shared-prefix check; a reference model first scores the whole sequences (no gradient)."""
    if shared_prefix.enabled() and _reference_forward_needed(datums, loss, reference):
        datums = _with_reference_logprobs(datums, loss, reference, device)
    split = shared_prefix.split_shared_prefixes(datums) if shared_prefix.enabled() else None
    if split is not None and prefix_check.shares_prefixes(model, datums, split, loss.temperature, device):
        batch = dataclasses.replace(pad_batch(split.suffixes, device),
                                    longest=max(len(d.tokens) for d in datums))
        forward = shared_prefix.forward_with_prefixes(model, split, batch, loss.temperature, device)
        value, logprobs_B_T = _backward(forward.logits_B_S_V, batch, loss, norm, reference, metrics)
        metrics.add_count(PREFIX_SHARED, shared_prefix.tokens_not_run(datums, split), _tokens(datums))
        return value, shared_prefix.full_logprob_rows(split, forward, logprobs_B_T)
    metrics.add_count(PREFIX_SHARED, 0.0, _tokens(datums))
    batch = pad_batch(datums, device)
    logits_B_T_V = forward_logits(model, batch.tokens_B_T, batch.attention_mask_B_T)
    value, logprobs_B_T = _backward(logits_B_T_V, batch, loss, norm, reference, metrics)
    return value, [logprobs_B_T[row, :n].tolist() for row, n in enumerate(batch.lengths)]


def _tokens(datums: Sequence[Datum]) -> float:
    return float(sum(len(d.tokens) for d in datums))


def _reference_forward_needed(datums: Sequence[Datum], loss: LossConfig,
                              reference: ReferenceFn | None) -> bool:
    return loss.needs_reference and reference is not None and not all(d.reference_logprobs for d in datums)


def _with_reference_logprobs(datums: Sequence[Datum], loss: LossConfig, reference: ReferenceFn,
                             device: str | torch.device) -> list[Datum]:
    """`datums` carrying the reference model's logprobs of their whole sequences."""
    batch = pad_batch(datums, device)
    with torch.no_grad():
        reference_B_T = reference(batch.tokens_B_T, batch.attention_mask_B_T, loss.temperature)
    return [dataclasses.replace(datum, reference_logprobs=tuple(reference_B_T[row, :n].tolist()))
            for row, (datum, n) in enumerate(zip(datums, batch.lengths))]


def _backward(logits_B_T_V: torch.Tensor, batch: Batch, loss: LossConfig,
              norm: losses.LossNorm | None, reference: ReferenceFn | None,
              metrics: MetricSums) -> tuple[float, torch.Tensor]:
    """Backward of the objective over `batch` given its logits; (its value, its logprobs_B_T)."""
    value, logprobs_B_T = batch_objective(logits_B_T_V, batch, loss, norm, reference, metrics)
    value.backward()
    return float(value.detach()), logprobs_B_T


def batch_objective(logits_B_T_V: torch.Tensor, batch: Batch, loss: LossConfig,
                    norm: losses.LossNorm | None, reference: ReferenceFn | None,
                    metrics: MetricSums) -> tuple[torch.Tensor, torch.Tensor]:
    """The objective over `batch` given its logits, not yet backpropagated; (the value, with its
    graph, and the batch's logprobs_B_T, detached). Records the batch's metrics."""
    reference_B_T = _reference_logprobs(batch, loss, reference)
    if loss.kl_in_reward:
        batch = _with_kl_reward(batch, reference_B_T, loss, metrics)
        reference_B_T = None
    logprobs_B_T = logprobs_from_logits(logits_B_T_V, batch.tokens_B_T, batch.attention_mask_B_T,
                                        loss.temperature)
    entropy_B_T = entropy_from_logits(logits_B_T_V, batch.attention_mask_B_T, loss.temperature)
    if loss.entropy_coef == 0:
        entropy_B_T = entropy_B_T.detach()
    value = objective(logprobs_B_T, entropy_B_T, reference_B_T, batch, loss, norm, metrics)
    return value, logprobs_B_T.detach()


def objective(logprobs_B_T: torch.Tensor, entropy_B_T: torch.Tensor,
              reference_B_T: torch.Tensor | None, batch: Batch, loss: LossConfig,
              norm: losses.LossNorm | None, metrics: MetricSums) -> torch.Tensor:
    """Policy term + kl_coef * KL - entropy_coef * entropy, each aggregated over the loss
    weights (the loss mask times the importance keep); records metrics. norm None: `batch` is
    the whole batch, and its weights give the denominators."""
    trained_B_T = (batch.loss_mask_B_T > 0).float()
    keep_B_T = importance_keep(logprobs_B_T, batch, loss)
    weights_B_T = batch.loss_mask_B_T if keep_B_T is None else batch.loss_mask_B_T * keep_B_T
    if norm is None:
        norm = losses.loss_norm([row[:n] for row, n in zip(weights_B_T, batch.lengths)],
                                loss.token_sum_divisor, longest=batch.longest)
    policy = policy_loss(logprobs_B_T, batch, loss, weights_B_T)
    total = losses.aggregate(policy.loss_B_T, weights_B_T, loss.aggregation, norm)
    if reference_B_T is not None:
        kl_B_T = losses.kl_penalty(logprobs_B_T, reference_B_T, loss.kl_estimator)
        total = total + loss.kl_coef * losses.aggregate(kl_B_T, weights_B_T, loss.aggregation, norm)
        metrics.add("kl", kl_B_T, trained_B_T)
    if loss.entropy_coef:
        total = total - loss.entropy_coef * losses.aggregate(
            entropy_B_T, weights_B_T, loss.aggregation, norm)
    _record_metrics(metrics, policy, logprobs_B_T, entropy_B_T, batch, loss, trained_B_T)
    _record_importance_metrics(metrics, policy, keep_B_T, loss, trained_B_T)
    return total


def importance_keep(logprobs_B_T: torch.Tensor, batch: Batch,
                    loss: LossConfig) -> torch.Tensor | None:
    """The batch's importance keep: the pre-pass's when the datums carry one, else computed
    from these (detached) logprobs; None when the loss masks nothing."""
    if not loss.masks_importance:
        return None
    if batch.importance_keep_B_T is not None:
        return batch.importance_keep_B_T
    return losses.importance_keep(logprobs_B_T, batch.sampling_logprobs_B_T, batch.loss_mask_B_T,
                                  loss.importance_mask, loss.importance_mask_low,
                                  loss.importance_mask_high)


def policy_loss(logprobs_B_T: torch.Tensor, batch: Batch, loss: LossConfig,
                weights_B_T: torch.Tensor | None = None) -> losses.PolicyLoss:
    """The per-token policy term of `loss.function` (GSPO's sequence ratio averages over
    `weights_B_T`, the batch's loss mask when None)."""
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
            weights_B_T = batch.loss_mask_B_T if weights_B_T is None else weights_B_T
            return losses.gspo(logprobs_B_T, old_B_T, advantages_B_T, weights_B_T,
                               loss.clip_low, loss.clip_high)
        case LossFunction.IMPORTANCE_SAMPLING:
            return losses.importance_sampling(logprobs_B_T, old_B_T, advantages_B_T)
        case LossFunction.CISPO:
            return losses.cispo(logprobs_B_T, old_B_T, advantages_B_T, loss.clip_low, loss.clip_high)
        case LossFunction.DRO:
            return losses.dro(logprobs_B_T, old_B_T, advantages_B_T, loss.dro_beta)
    raise AssertionError(f"unhandled loss function {loss.function}")


def _record_metrics(metrics: MetricSums, policy: losses.PolicyLoss, logprobs_B_T: torch.Tensor,
                    entropy_B_T: torch.Tensor, batch: Batch, loss: LossConfig,
                    trained_B_T: torch.Tensor) -> None:
    """Means over the trained tokens (loss mask > 0, masked by the importance mask or not)."""
    metrics.add("entropy", entropy_B_T, trained_B_T)
    metrics.add("logprob/mean", logprobs_B_T, trained_B_T)
    ratio_B_T = policy.ratio_B_T
    if policy.ratio_B_T is not None:
        metrics.add("clip_fraction", policy.clipped_B_T.float(), trained_B_T)
    elif batch.has_sampling_logprobs and loss.uses_advantages:
        ratio_B_T = losses.importance_ratio(logprobs_B_T, batch.sampling_logprobs_B_T)
    if ratio_B_T is not None:
        metrics.add("ratio/mean", ratio_B_T, trained_B_T)
        metrics.add_max("ratio/max", ratio_B_T, trained_B_T)
    if batch.has_sampling_logprobs:
        gap_B_T = (logprobs_B_T - batch.sampling_logprobs_B_T).abs()
        metrics.add("logprob_gap/mean", gap_B_T, trained_B_T)


def _record_importance_metrics(metrics: MetricSums, policy: losses.PolicyLoss,
                               keep_B_T: torch.Tensor | None, loss: LossConfig,
                               trained_B_T: torch.Tensor) -> None:
    """is/masked_fraction and is/truncated_fraction of the trained tokens (policy-gradient
    losses only; 0 when the mask is off or the loss truncates nothing)."""
    if not loss.uses_advantages:
        return
    masked_B_T = torch.zeros_like(trained_B_T) if keep_B_T is None else 1 - keep_B_T
    metrics.add("is/masked_fraction", masked_B_T, trained_B_T)
    truncated_B_T = (policy.clipped_B_T.float() if loss.function == LossFunction.TRUNCATED_IS
                     else torch.zeros_like(trained_B_T))
    metrics.add("is/truncated_fraction", truncated_B_T, trained_B_T)


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
