"""The importance pre-pass of masked importance sampling (`LossConfig.importance_mask`).

A masked token counts in no denominator, so the batch's denominators (`training.batch_norm`)
need every datum's keep mask before the first micro-batch's backward. A batch that is one
micro-batch on one device computes its mask inside that micro-batch (`training.objective`,
no extra forward); any other batch first runs this pre-pass: one forward without gradient,
micro-batched like the training pass, and the datums carry their `importance_keep` to every
micro-batch and rank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from opentinker_trainer import losses
from opentinker_trainer.batching import Datum, pad_batch, plan_micro_batches
from opentinker_trainer.config import LossConfig

# (tokens_B_T, attention_mask_B_T, temperature) -> the policy's logprobs_B_T, without gradient
PolicyLogprobsFn = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]


def needs_pre_pass(datums: Sequence[Datum], loss: LossConfig, *, max_tokens: int,
                   world_size: int) -> bool:
    """Whether the batch's keep masks must be computed before its backward passes: the loss
    masks importance and the batch is split over micro-batches or ranks."""
    if not loss.masks_importance:
        return False
    return world_size > 1 or len(plan_micro_batches([len(d.tokens) for d in datums], max_tokens)) > 1


def with_importance_keep(datums: Sequence[Datum], loss: LossConfig, logprobs: PolicyLogprobsFn, *,
                         max_tokens: int, device: str | torch.device = "cpu") -> list[Datum]:
    """`datums`, each carrying its importance keep under the current parameters."""
    kept = list(datums)
    for indices in plan_micro_batches([len(d.tokens) for d in datums], max_tokens):
        batch = pad_batch([datums[i] for i in indices], device)
        logprobs_B_T = logprobs(batch.tokens_B_T, batch.attention_mask_B_T, loss.temperature)
        keep_B_T = losses.importance_keep(logprobs_B_T, batch.sampling_logprobs_B_T,
                                          batch.loss_mask_B_T, loss.importance_mask,
                                          loss.importance_mask_low, loss.importance_mask_high)
        for row, index in enumerate(indices):
            keep = tuple(keep_B_T[row, :batch.lengths[row]].tolist())
            kept[index] = dataclasses.replace(datums[index], importance_keep=keep)
    return kept
