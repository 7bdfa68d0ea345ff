"""The joint pass of a cycle: every call's objective over routed micro-batches, one backward each.

Each micro-batch holds the rows of a few calls, each call's rows together (`plan_by_call`). A
call whose rows share prompt prefixes (a GRPO group's completions) runs them as it would alone
(`shared_prefix`): each distinct prefix once with a KV cache, the datums from their cuts on,
attending to it; such calls of one temperature run their prefixes in one routed forward and
their suffixes in another. The other calls' rows run whole in one routed forward. Every call's
objective uses its own loss config and its whole batch's denominators; the micro-batch's
objectives are summed and backpropagated once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from opentinker_trainer import losses, prefix_check, shared_prefix
from opentinker_trainer.adapter_router import AdapterRouter
from opentinker_trainer.batching import Datum, pad_batch
from opentinker_trainer.config import LossConfig
from opentinker_trainer.shared_prefix import PrefixForward, PrefixSplit
from opentinker_trainer.training import PREFIX_SHARED, MetricSums, ShardResult, batch_norm, batch_objective


@dataclass(frozen=True, kw_only=True)
class PassCall:
    """One call as the joint pass sees it: its session's model (for the prefix check), adapter
    key, datums and loss."""

    model: object
    key: Hashable
    datums: Sequence[Datum]
    loss: LossConfig


@dataclass
class _Sums:
    """What the pass gathers for one call."""

    norm: losses.LossNorm
    metrics: MetricSums
    logprobs: list[list[float]]
    value: float = 0.0


def joint_pass(router: AdapterRouter, calls: Sequence[PassCall], plan: Sequence[Sequence[tuple[int, int]]],
               device: str) -> list[ShardResult]:
    """`plan`: per micro-batch its rows as (call index, datum index), each call's rows together."""
    sums = [_Sums(norm=batch_norm(call.datums, call.loss), metrics=MetricSums(),
                  logprobs=[[] for _ in call.datums]) for call in calls]
    for members in plan:
        rows_of = {c: [d for owner, d in members if owner == c] for c in dict.fromkeys(c for c, _ in members)}
        splits = {c: _split(calls[c], [calls[c].datums[d] for d in ds], device) for c, ds in rows_of.items()}
        prefixed = _one_temperature([c for c in rows_of if splits[c] is not None], calls)
        whole = [c for c in rows_of if c not in prefixed]
        values = []
        if whole:
            values += _whole_rows(router, calls, {c: rows_of[c] for c in whole}, sums, device)
        if prefixed:
            values += _prefixed_rows(router, calls, {c: rows_of[c] for c in prefixed},
                                     {c: splits[c] for c in prefixed}, sums, device)
        torch.stack(values).sum().backward()
    return [ShardResult(loss=s.value, metrics=s.metrics, logprobs=s.logprobs) for s in sums]


def _split(call: PassCall, datums: list[Datum], device: str) -> PrefixSplit | None:
    """The call's rows cut after their shared prefixes, when sharing applies to them."""
    if not shared_prefix.enabled():
        return None
    split = shared_prefix.split_shared_prefixes(datums)
    if split is None or not prefix_check.shares_prefixes(call.model, datums, split, call.loss.temperature, device):
        return None
    return split


def _one_temperature(prefixed: list[int], calls: Sequence[PassCall]) -> list[int]:
    """The prefixed calls of the first one's temperature (the prefix forward's logprobs use one)."""
    return [c for c in prefixed if calls[c].loss.temperature == calls[prefixed[0]].loss.temperature] if prefixed else []


def _whole_rows(router: AdapterRouter, calls: Sequence[PassCall], rows_of: dict[int, list[int]],
                sums: list[_Sums], device: str) -> list[torch.Tensor]:
    """One routed forward over these calls' whole rows; each call's objective value."""
    members = [(c, d) for c, ds in rows_of.items() for d in ds]
    batch = pad_batch([calls[c].datums[d] for c, d in members], device)
    logits_B_T_V = router.logits([calls[c].key for c, _ in members], batch.tokens_B_T, batch.attention_mask_B_T)
    values, start = [], 0
    for c, ds in rows_of.items():
        ours = pad_batch([calls[c].datums[d] for d in ds], device)
        value, logprobs_B_T = batch_objective(logits_B_T_V[start:start + len(ds), :ours.tokens_B_T.shape[1]], ours,
                                              calls[c].loss, sums[c].norm, None, sums[c].metrics)
        for row, (d, n) in enumerate(zip(ds, ours.lengths)):
            sums[c].logprobs[d] = logprobs_B_T[row, :n].tolist()
        sums[c].metrics.add_count(PREFIX_SHARED, 0.0, _tokens(calls[c].datums[d] for d in ds))
        values.append(_counted(value, sums[c]))
        start += len(ds)
    return values


def _prefixed_rows(router: AdapterRouter, calls: Sequence[PassCall], rows_of: dict[int, list[int]],
                   splits: dict[int, PrefixSplit], sums: list[_Sums], device: str) -> list[torch.Tensor]:
    """These calls' prefixes in one routed forward, their suffixes in another; each call's value."""
    combined, prefix_keys, suffix_keys = _combined(splits, calls)
    suffixes = pad_batch(combined.suffixes, device)
    temperature = calls[next(iter(rows_of))].loss.temperature
    forward = shared_prefix.forward_with_prefixes(router.calling([prefix_keys, suffix_keys]), combined, suffixes,
                                                  temperature, device)
    values, prefix_start, start = [], 0, 0
    for c, ds in rows_of.items():
        split, datums = splits[c], [calls[c].datums[d] for d in ds]
        rows, prefixes = len(split.suffixes), len(split.prefixes)
        ours = dataclasses.replace(pad_batch(split.suffixes, device), longest=max(len(d.tokens) for d in datums))
        value, logprobs_B_S = batch_objective(forward.logits_B_S_V[start:start + rows, :ours.tokens_B_T.shape[1]],
                                              ours, calls[c].loss, sums[c].norm, None, sums[c].metrics)
        own = PrefixForward(logits_B_S_V=forward.logits_B_S_V[start:start + rows],
                            prefix_logprobs_U_P=forward.prefix_logprobs_U_P[prefix_start:prefix_start + prefixes],
                            cut_logprobs_B=forward.cut_logprobs_B[start:start + rows])
        for d, row in zip(ds, shared_prefix.full_logprob_rows(split, own, logprobs_B_S)):
            sums[c].logprobs[d] = row
        sums[c].metrics.add_count(PREFIX_SHARED, shared_prefix.tokens_not_run(datums, split), _tokens(datums))
        values.append(_counted(value, sums[c]))
        start, prefix_start = start + rows, prefix_start + prefixes
    return values


def _combined(splits: dict[int, PrefixSplit], calls: Sequence[PassCall]) -> tuple[PrefixSplit, list, list]:
    """One split of every call's rows (each call's prefixes, then its suffixes, in call order)
    and the adapter key of each prefix row and each suffix row."""
    prefixes, owner, suffixes, cuts, prefix_keys, suffix_keys = [], [], [], [], [], []
    for c, split in splits.items():
        owner += [len(prefixes) + o for o in split.owner]
        prefixes += split.prefixes
        suffixes += split.suffixes
        cuts += split.cuts
        prefix_keys += [calls[c].key] * len(split.prefixes)
        suffix_keys += [calls[c].key] * len(split.suffixes)
    combined = PrefixSplit(prefixes=tuple(prefixes), owner=tuple(owner), suffixes=tuple(suffixes), cuts=tuple(cuts))
    return combined, prefix_keys, suffix_keys


def _counted(value: torch.Tensor, sums: _Sums) -> torch.Tensor:
    sums.value += float(value.detach())
    return value


def _tokens(datums) -> float:  # noqa: ANN001 - any iterable of datums
    return float(sum(len(d.tokens) for d in datums))
