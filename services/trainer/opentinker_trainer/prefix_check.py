"""Whether a model may run shared prefixes: checked once per model, on its first batch.

The shared-prefix forward relies on the model honouring a KV cache with explicit positions and
a padding mask the way a whole-sequence forward does. Every causal LM in transformers does;
a custom architecture may not. So before a model's first shared-prefix ForwardBackward, a few
of the batch's datums run both ways without gradient, and sharing is used only when their
logprobs agree; otherwise the model keeps the plain forward (logged once).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import structlog
import torch

from opentinker_runtime.ml.logprobs import logprobs_from_logits, token_logprobs
from opentinker_trainer.batching import Datum, pad_batch
from opentinker_trainer.shared_prefix import (PrefixSplit, forward_with_prefixes, full_logprob_rows,
                                              split_shared_prefixes)

log = structlog.get_logger(__name__)

CHECKED_DATUMS = 4
TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-6}
LOW_PRECISION_TOLERANCE = 5e-2

_verdicts: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def shares_prefixes(model: Any, datums: Sequence[Datum], split: PrefixSplit, temperature: float,
                    device: str | torch.device) -> bool:
    """True when `model` reproduces the plain forward's logprobs with shared prefixes (checked
    on a few of `datums` the first time a model is seen)."""
    verdict = _verdicts.get(model)
    if verdict is None:
        verdict = _verdicts[model] = _agrees(model, _sample(datums, split), temperature, device)
    return verdict


def _sample(datums: Sequence[Datum], split: PrefixSplit) -> list[Datum]:
    """Up to CHECKED_DATUMS datums spanning the most prefixes, two of a shared one first."""
    shared = next((o for o in split.owner if split.owner.count(o) > 1), split.owner[0])
    first = [d for d, o in zip(datums, split.owner) if o == shared][:2]
    others = [d for d, o in zip(datums, split.owner) if o != shared]
    return (first + others)[:CHECKED_DATUMS]


def _agrees(model: Any, datums: list[Datum], temperature: float, device: str | torch.device) -> bool:
    split = split_shared_prefixes(datums, min_saved_fraction=0.0)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            plain = pad_batch(datums, device)
            plain_B_T = token_logprobs(model, plain.tokens_B_T, plain.attention_mask_B_T, temperature)
            suffixes = pad_batch(split.suffixes, device)
            forward = forward_with_prefixes(model, split, suffixes, temperature, device)
            suffix_B_S = logprobs_from_logits(forward.logits_B_S_V, suffixes.tokens_B_T,
                                              suffixes.attention_mask_B_T, temperature)
            shared_rows = full_logprob_rows(split, forward, suffix_B_S)
    except Exception as error:  # noqa: BLE001 - any failure means: keep the plain forward
        log.warning("shared_prefix_disabled", model=type(model).__name__, reason=repr(error))
        return False
    finally:
        model.train(was_training)
    gap = max(abs(a - b) for row, n, shared in zip(plain_B_T, plain.lengths, shared_rows)
              for a, b in zip(row[:n].tolist(), shared))
    agrees = gap <= _tolerance(model)
    log.info("shared_prefix_checked", model=type(model).__name__, max_logprob_gap=gap, shares=agrees)
    return agrees


def _tolerance(model: Any) -> float:
    dtype = next((p.dtype for p in model.parameters()), torch.float32)
    return TOLERANCE.get(dtype, LOW_PRECISION_TOLERANCE)
