"""Shared prompt prefixes: the untrained prefix that datums share runs through the model once.

A GRPO group is G completions of one prompt, so a batch of B x G datums repeats every prompt
G times, and a math prompt is most of its datum. Here each distinct prefix (the tokens before a
datum's first trained token, less one) is run once with a KV cache; each datum then runs only
from its cut on, attending to its prefix's cached keys and values, which keep their graph, so
gradients flow back through the prefix exactly as in one forward over the whole sequence.

Every token that the loss reads gets the same logprob as in the whole-sequence forward (up to
float rounding): the attention sees the same keys at the same positions. The suffix batch
follows the datum convention from each datum's cut (index 0 is the token at the cut, never
trained); the prefix forward gives the logprobs of the prefix tokens and of the token at the
cut, so `full_logprob_rows` returns whole rows as the plain path does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from opentinker_runtime.ml.logprobs import logprobs_from_logits
from opentinker_trainer.batching import Batch, Datum

MIN_SAVED_FRACTION = 0.1  # below this share of tokens saved, one plain forward is cheaper

_enabled = [True]


def set_enabled(enabled: bool) -> None:
    """Turn prefix sharing on or off in this process (the Trainer's `share_prefixes`)."""
    _enabled[0] = enabled


def enabled() -> bool:
    return _enabled[0]


@dataclass(frozen=True, kw_only=True)
class PrefixSplit:
    """Datums cut after their shared prefixes.

    prefixes: the distinct prefixes; owner[i]: the index of datum i's prefix; suffixes[i]: datum
    i from its cut on (its per-token arrays cut alike); cuts[i]: the length of datum i's prefix.
    """

    prefixes: tuple[tuple[int, ...], ...]
    owner: tuple[int, ...]
    suffixes: tuple[Datum, ...]
    cuts: tuple[int, ...]


def split_shared_prefixes(datums: Sequence[Datum],
                          min_saved_fraction: float = MIN_SAVED_FRACTION) -> PrefixSplit | None:
    """The split of `datums` by shared prefix, or None when sharing saves too little (fewer
    than `min_saved_fraction` of the tokens) or some datum has no prefix to share."""
    cuts = _cuts(datums)
    if not datums or min(cuts) < 1:
        return None
    index: dict[tuple[int, ...], int] = {}
    owner = [index.setdefault(datum.tokens[:cut], len(index)) for datum, cut in zip(datums, cuts)]
    prefixes = tuple(index)
    saved = sum(cuts) - sum(len(prefix) for prefix in prefixes)
    if saved < min_saved_fraction * sum(len(d.tokens) for d in datums):
        return None
    return PrefixSplit(prefixes=prefixes, owner=tuple(owner), cuts=tuple(cuts),
                       suffixes=tuple(_from(datum, cut) for datum, cut in zip(datums, cuts)))


def _cuts(datums: Sequence[Datum]) -> list[int]:
    """Each datum's cut: its own (`_cut`), or, for a datum that no other shares its prefix
    with, the longest prefix that others share and it starts with (one prefix fewer to run)."""
    cuts = [_cut(datum) for datum in datums]
    counts = Counter(datum.tokens[:cut] for datum, cut in zip(datums, cuts))
    shared = sorted((key for key, count in counts.items() if count > 1), key=len, reverse=True)
    for i, (datum, cut) in enumerate(zip(datums, cuts)):
        if counts[datum.tokens[:cut]] == 1:
            cuts[i] = next((len(key) for key in shared
                            if len(key) <= cut and datum.tokens[:len(key)] == key), cut)
    return cuts


def tokens_not_run(datums: Sequence[Datum], split: PrefixSplit) -> int:
    """How many of the datums' tokens the shared-prefix forward does not run."""
    run = sum(len(prefix) for prefix in split.prefixes) + sum(len(s.tokens) for s in split.suffixes)
    return sum(len(d.tokens) for d in datums) - run


def _cut(datum: Datum) -> int:
    """Where datum's suffix starts: one before its first trained token (the suffix's index 0 is
    never trained), or its last token when it trains none."""
    first = next((t for t in range(1, len(datum.tokens)) if datum.loss_mask[t] > 0), None)
    return (first if first is not None else len(datum.tokens)) - 1


def _from(datum: Datum, cut: int) -> Datum:
    def tail(values: tuple[float, ...]) -> tuple[float, ...]:
        return values[cut:] if values else values

    return replace(datum, tokens=datum.tokens[cut:], loss_mask=tail(datum.loss_mask),
                   advantages=tail(datum.advantages), sampling_logprobs=tail(datum.sampling_logprobs),
                   reference_logprobs=tail(datum.reference_logprobs),
                   importance_keep=tail(datum.importance_keep))


@dataclass(frozen=True, kw_only=True)
class PrefixForward:
    """logits_B_S_V of the suffix batch (float32, in the graph) and, detached, the prefix rows'
    logprobs_U_P and the logprob of each datum's token at its cut (cut_logprobs_B)."""

    logits_B_S_V: torch.Tensor
    prefix_logprobs_U_P: torch.Tensor
    cut_logprobs_B: torch.Tensor


def forward_with_prefixes(model: Any, split: PrefixSplit, suffixes: Batch, temperature: float,
                          device: str | torch.device = "cpu") -> PrefixForward:
    """The suffix batch's logits, each row attending to its prefix's cached keys and values."""
    widths = [len(prefix) for prefix in split.prefixes]
    width = max(widths)
    prefix_U_P = torch.zeros(len(widths), width, dtype=torch.long)
    prefix_mask_U_P = torch.zeros(len(widths), width, dtype=torch.long)
    for row, prefix in enumerate(split.prefixes):
        prefix_U_P[row, :len(prefix)] = torch.tensor(prefix, dtype=torch.long)
        prefix_mask_U_P[row, :len(prefix)] = 1
    prefix_U_P, prefix_mask_U_P = prefix_U_P.to(device), prefix_mask_U_P.to(device)
    positions_U_P = torch.arange(width, device=device).expand(len(widths), width)
    # Right padding: every padded query still attends to real keys (no all-masked row).
    prefix_out = model(input_ids=prefix_U_P, attention_mask=prefix_mask_U_P,
                       position_ids=positions_U_P, use_cache=True)
    owner_B = torch.tensor(split.owner, dtype=torch.long, device=device)
    cache = prefix_out.past_key_values
    cache.reorder_cache(owner_B)  # one row per datum (index_select: gradients add back up)
    cuts_B = torch.tensor(split.cuts, dtype=torch.long, device=device)
    steps_S = torch.arange(suffixes.tokens_B_T.shape[1], device=device)
    suffix_out = model(input_ids=suffixes.tokens_B_T,
                       attention_mask=torch.cat([prefix_mask_U_P[owner_B], suffixes.attention_mask_B_T], 1),
                       position_ids=cuts_B[:, None] + steps_S[None, :], past_key_values=cache,
                       use_cache=True)
    prefix_logits_U_P_V = prefix_out.logits.detach().float()
    return PrefixForward(
        logits_B_S_V=suffix_out.logits.float(),
        prefix_logprobs_U_P=logprobs_from_logits(prefix_logits_U_P_V, prefix_U_P, prefix_mask_U_P,
                                                 temperature),
        cut_logprobs_B=_cut_logprobs(prefix_logits_U_P_V, owner_B, cuts_B,
                                     suffixes.tokens_B_T[:, 0], temperature))


def _cut_logprobs(prefix_logits_U_P_V: torch.Tensor, owner_B: torch.Tensor, cuts_B: torch.Tensor,
                  tokens_B: torch.Tensor, temperature: float) -> torch.Tensor:
    """logprob of each datum's token at its cut, from its prefix's last position."""
    last_B_V = prefix_logits_U_P_V[owner_B, cuts_B - 1]
    logp_B_V = torch.log_softmax(last_B_V / temperature, dim=-1)
    return logp_B_V.gather(-1, tokens_B[:, None]).squeeze(-1)


def full_logprob_rows(split: PrefixSplit, forward: PrefixForward,
                      suffix_logprobs_B_S: torch.Tensor) -> list[list[float]]:
    """Each datum's logprobs over all its tokens (index 0 = 0), as the plain forward gives."""
    rows = []
    for b, (owner, cut, suffix) in enumerate(zip(split.owner, split.cuts, split.suffixes)):
        prefix = forward.prefix_logprobs_U_P[owner, :cut].tolist()
        tail = suffix_logprobs_B_S[b, 1:len(suffix.tokens)].tolist()
        rows.append(prefix + [float(forward.cut_logprobs_B[b])] + tail)
    return rows
