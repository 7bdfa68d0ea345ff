"""Datums: validation, right-padding into tensors and micro-batches by a token budget."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from opentinker_trainer.config import LossConfig
from opentinker_trainer.errors import ValidationError

PER_TOKEN_FIELDS = ("loss_mask", "advantages", "sampling_logprobs", "reference_logprobs")


@dataclass(frozen=True, kw_only=True)
class Datum:
    """One training sequence; per-token arrays are aligned with `tokens` (index 0 untrained).

    Optional arrays are empty when absent. `importance_keep` is never sent by a caller: the
    Trainer's importance pre-pass sets it (1 = the token keeps its loss weight, 0 = masked).
    """

    tokens: tuple[int, ...]
    loss_mask: tuple[float, ...]
    advantages: tuple[float, ...] = ()
    sampling_logprobs: tuple[float, ...] = ()
    reference_logprobs: tuple[float, ...] = ()
    group_id: str = ""
    importance_keep: tuple[float, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Batch:
    """Datums right-padded to the longest; absent per-token arrays are zeros.

    loss_mask_B_T is 0 at index 0 and on padding. reference_logprobs_B_T is None unless every
    datum carries reference logprobs; importance_keep_B_T unless every datum carries its
    importance keep (then 1 on padding).
    """

    tokens_B_T: torch.Tensor
    attention_mask_B_T: torch.Tensor
    loss_mask_B_T: torch.Tensor
    advantages_B_T: torch.Tensor
    sampling_logprobs_B_T: torch.Tensor
    reference_logprobs_B_T: torch.Tensor | None
    lengths: tuple[int, ...]
    has_sampling_logprobs: bool
    importance_keep_B_T: torch.Tensor | None = None
    longest: int = 0  # rows cut after a shared prefix: the longest whole datum (0 = not cut)


def validate_datums(datums: Sequence[Datum], loss: LossConfig, *, vocab_size: int,
                    max_length: int) -> None:
    """ValidationError naming the first bad field, e.g. "datums[2].advantages"."""
    if not datums:
        raise ValidationError("datums", "must hold at least one datum")
    for index, datum in enumerate(datums):
        _validate_tokens(datum, f"datums[{index}]", vocab_size, max_length)
        _validate_arrays(datum, f"datums[{index}]", loss)


def validate_sequences(sequences: Sequence[Sequence[int]], *, vocab_size: int,
                       max_length: int) -> None:
    """The token checks of `validate_datums` for ComputeLogprobs sequences."""
    if not sequences:
        raise ValidationError("sequences", "must hold at least one sequence")
    for index, tokens in enumerate(sequences):
        datum = Datum(tokens=tuple(tokens), loss_mask=(0.0,) * len(tokens))
        _validate_tokens(datum, f"sequences[{index}]", vocab_size, max_length)


def _validate_tokens(datum: Datum, where: str, vocab_size: int, max_length: int) -> None:
    if not datum.tokens:
        raise ValidationError(f"{where}.tokens", "must not be empty")
    if len(datum.tokens) > max_length:
        raise ValidationError(f"{where}.tokens", f"has {len(datum.tokens)} tokens; the model's "
                              f"context holds {max_length}")
    bad = next((t for t in datum.tokens if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValidationError(f"{where}.tokens", f"token id {bad} is outside the vocabulary "
                              f"[0, {vocab_size})")


def _validate_arrays(datum: Datum, where: str, loss: LossConfig) -> None:
    required = {"loss_mask": True, "advantages": loss.uses_advantages,
                "sampling_logprobs": loss.uses_ratio or loss.kl_in_reward or loss.masks_importance,
                "reference_logprobs": False}
    for name in PER_TOKEN_FIELDS:
        values = getattr(datum, name)
        if not values and not required[name]:
            continue
        reason = f" ({_needed_by(loss, name)} needs it)" if not values and name != "loss_mask" else ""
        if len(values) != len(datum.tokens):
            raise ValidationError(f"{where}.{name}", f"has {len(values)} values for "
                                  f"{len(datum.tokens)} tokens; one per token is required{reason}")
        if not all(math.isfinite(v) for v in values):
            raise ValidationError(f"{where}.{name}", "must hold finite numbers only")
    if any(m < 0 for m in datum.loss_mask):
        raise ValidationError(f"{where}.loss_mask", "weights must be >= 0")


def _needed_by(loss: LossConfig, name: str) -> str:
    if name == "sampling_logprobs" and not loss.uses_ratio:
        return "importance_mask" if loss.masks_importance else "KL_PLACEMENT_REWARD"
    return str(loss.function)


def pad_batch(datums: Sequence[Datum], device: str | torch.device = "cpu") -> Batch:
    """Right-pad `datums` (already validated) into one Batch on `device`."""
    lengths = tuple(len(d.tokens) for d in datums)
    width = max(lengths)
    references = all(d.reference_logprobs for d in datums)
    keeps = all(d.importance_keep for d in datums)
    loss_mask_B_T = _padded([d.loss_mask for d in datums], width, torch.float32, device)
    loss_mask_B_T[:, 0] = 0.0
    return Batch(
        tokens_B_T=_padded([d.tokens for d in datums], width, torch.long, device),
        attention_mask_B_T=_padded([(1,) * n for n in lengths], width, torch.long, device),
        loss_mask_B_T=loss_mask_B_T,
        advantages_B_T=_padded([d.advantages for d in datums], width, torch.float32, device),
        sampling_logprobs_B_T=_padded([d.sampling_logprobs for d in datums], width,
                                      torch.float32, device),
        reference_logprobs_B_T=_padded([d.reference_logprobs for d in datums], width,
                                       torch.float32, device) if references else None,
        lengths=lengths, has_sampling_logprobs=all(d.sampling_logprobs for d in datums),
        importance_keep_B_T=_padded([d.importance_keep for d in datums], width, torch.float32,
                                    device, fill=1.0) if keeps else None)


def _padded(rows: Sequence[Sequence[float]], width: int, dtype: torch.dtype,
            device: str | torch.device, fill: float = 0.0) -> torch.Tensor:
    out_B_T = torch.full((len(rows), width), fill, dtype=dtype)
    for row, values in enumerate(rows):
        if values:
            out_B_T[row, :len(values)] = torch.tensor(values, dtype=dtype)
    return out_B_T.to(device)


def plan_micro_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Datum indices per micro-batch, longest first, each padded size (rows x longest row)
    within `max_tokens`; a datum longer than the budget goes alone. 0 = one micro-batch."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    if max_tokens <= 0:
        return [order] if order else []
    batches: list[list[int]] = []
    for index in order:
        current = batches[-1] if batches else None
        if current and (len(current) + 1) * lengths[current[0]] <= max_tokens:
            current.append(index)
        else:
            batches.append([index])
    return batches


def datum_loss_mask(datum: Datum) -> torch.Tensor:
    """mask_T of one datum with index 0 zeroed (the tokens it trains)."""
    mask_T = torch.tensor(datum.loss_mask, dtype=torch.float32)
    mask_T[0] = 0.0
    return mask_T


def datum_loss_weights(datum: Datum) -> torch.Tensor:
    """weights_T the loss sees: the loss mask times the importance keep, when there is one."""
    mask_T = datum_loss_mask(datum)
    if datum.importance_keep:
        mask_T = mask_T * torch.tensor(datum.importance_keep, dtype=torch.float32)
    return mask_T
