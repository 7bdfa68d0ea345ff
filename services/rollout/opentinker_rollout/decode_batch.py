"""The running batch of a transformers engine: rows join between decoding steps (continuous batching).

A `DecodeBatch` holds the rows being decoded, their KV cache (`DynamicCache`, left-padded
to a common length), attention mask [B, T], the position of each row's next input [B, 1]
and that input, the token each row sampled last [B]. One `advance` does, in order:

1. decode: the running rows feed their last token (one forward of [B, 1]) and sample;
2. admit: new rows are prefilled together (their left-padded prompts, a fresh cache) and
   sample their first token, then join: both caches and masks are left-padded to the longer
   of the two and concatenated along the batch. Each distinct prompt (and adapter) is computed
   once: rows of one prompt (a GRPO group, n samples) share its forward, and a prompt that a
   running row already holds is not computed again (its KV and last logits are copied, while
   the weights are those it was computed with);
3. drop: finished rows leave the batch and the cache, and mask columns that no row attends
   to any more (left padding of rows that left) are trimmed away.

So a row that finishes frees its place at once and a request that arrives while others decode
starts at the next step, instead of waiting for the longest row of a whole batch. Rows compute
what they would alone: padding is masked and position ids count real tokens only.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import DynamicCache


class DecodeRow(Protocol):
    prompt_ids: tuple[int, ...]
    adapter: str

    @property
    def finished(self) -> bool: ...


Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, DynamicCache, Sequence[DecodeRow]], torch.Tensor]
"""(input_ids [B, S], attention [B, T], positions [B, S], cache, rows) -> last logits [B, V]."""
Sample = Callable[[Sequence[DecodeRow], torch.Tensor], torch.Tensor]
"""(rows, logits [B, V]) -> the token each row sampled [B]; records it on the row."""
WeightsVersion = Callable[[], Hashable]
"""Something that changes whenever the model's weights change (see `TransformersEngine`)."""
PromptKey = tuple[str, tuple[int, ...]]
"""(adapter, prompt ids): rows with equal keys have equal prompt KV and first logits."""


def prompt_key(row: DecodeRow) -> PromptKey:
    return row.adapter, tuple(row.prompt_ids)


@dataclass(frozen=True, kw_only=True)
class _Prompts:
    """Distinct prompts ready to join, one row each: KV per layer [U, H, W, D], mask [U, W],
    each one's next position [U, 1] and last logits [U, V]."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    attention: torch.Tensor
    next_positions: torch.Tensor
    logits: torch.Tensor


class DecodeBatch:
    """Rows decoding together; new rows join between steps."""

    def __init__(self, forward: Forward, sample: Sample, pad_id: int,
                 weights_version: WeightsVersion | None = None) -> None:
        """Without `weights_version`, only rows admitted together share a prompt's forward."""
        self._forward = forward
        self._sample = sample
        self._pad_id = pad_id
        self._weights_version = weights_version
        self._clear()

    def _clear(self) -> None:
        self.rows: list[DecodeRow] = []
        self._prompt_of: list[tuple[PromptKey, int]] = []
        """Each row's prompt and the weights epoch its prompt KV was computed in."""
        self._cache: DynamicCache | None = None
        self._attention = torch.zeros((0, 0), dtype=torch.long)
        self._positions = torch.zeros((0, 1), dtype=torch.long)
        self._tokens = torch.zeros((0,), dtype=torch.long)
        self._held_logits: dict[PromptKey, torch.Tensor] = {}
        """Last logits [V] of prompts that running rows of this epoch hold."""
        self._held_weights: Hashable = None
        self._epoch = 0
        """Counts weight changes seen: a row's prompt KV is shared only within its epoch."""

    def __len__(self) -> int:
        return len(self.rows)

    def advance(self, new_rows: Sequence[DecodeRow]) -> None:
        """One decoding step of the running rows, then the new rows' prefill; drops finished rows."""
        if self.rows:
            self._decode()
        if new_rows:
            self._admit(list(new_rows))
        self.drop_finished()

    def _decode(self) -> None:
        attention = torch.cat([self._attention, torch.ones_like(self._attention[:, :1])], dim=1)
        logits = self._forward(self._tokens[:, None], attention, self._positions, self._cache, self.rows)
        self._tokens = self._sample(self.rows, logits)
        self._attention, self._positions = attention, self._positions + 1

    def _admit(self, rows: list[DecodeRow]) -> None:
        keys = [prompt_key(row) for row in rows]
        prompts = self._prompts_of(rows, keys)
        tokens = self._sample(rows, prompts.logits)
        self._prompt_of += [(key, self._epoch) for key in keys]
        self._join(rows, _cache_of(prompts.layers), prompts.attention, prompts.next_positions, tokens)

    def _prompts_of(self, rows: list[DecodeRow], keys: list[PromptKey]) -> _Prompts:
        """One row per new row: each distinct prompt prefilled once, or copied from a running
        row that holds it (computed with the current weights)."""
        self._forget_held_if_weights_changed()
        distinct = list(dict.fromkeys(keys))
        held = [key for key in distinct if key in self._held_logits]
        fresh = [key for key in distinct if key not in self._held_logits]
        row_of = dict(zip(keys, rows, strict=True))
        parts = ([self._prefill(fresh, [row_of[key] for key in fresh])] if fresh else []) + \
                ([self._held_prompts(held)] if held else [])
        prompts = _stack(parts)
        if self._weights_version is not None:
            self._held_logits.update((key, logits) for key, logits in
                                     zip(fresh, prompts.logits[:len(fresh)].clone()) if key[1])
        return _one_row_each(prompts, fresh + held, keys)

    def _join(self, rows: list[DecodeRow], cache: DynamicCache, attention: torch.Tensor,
              next_positions: torch.Tensor, tokens: torch.Tensor) -> None:
        if not self.rows:
            self.rows, self._cache, self._attention = rows, cache, attention
            self._positions, self._tokens = next_positions, tokens
            return
        width = max(self._attention.shape[1], attention.shape[1])
        _join_caches(self._cache, cache, width)
        self._attention = torch.cat([_pad_left(self._attention, width), _pad_left(attention, width)])
        self._positions = torch.cat([self._positions, next_positions])
        self._tokens = torch.cat([self._tokens, tokens])
        self.rows = self.rows + rows

    def _prefill(self, keys: list[PromptKey], rows: list[DecodeRow]) -> _Prompts:
        """One forward over distinct prompts (`rows`: one row of each, for its adapter)."""
        input_ids, attention, positions = left_pad([prompt for _, prompt in keys], self._pad_id)
        cache = DynamicCache()
        logits = self._forward(input_ids, attention, positions, cache, rows)
        return _Prompts(layers=[(layer.keys, layer.values) for layer in cache.layers],
                        attention=attention, next_positions=positions[:, -1:] + 1, logits=logits)

    def _held_prompts(self, keys: list[PromptKey]) -> _Prompts:
        """Prompts that running rows of this epoch hold: KV columns copied from the first such row."""
        holder: dict[PromptKey, int] = {}
        for i, (key, epoch) in enumerate(self._prompt_of):
            if epoch == self._epoch:
                holder.setdefault(key, i)
        parts = []
        for key in keys:
            row, length = holder[key], len(key[1])
            start = int(self._attention[row].argmax())  # a row's mask: zeros, then its prompt
            parts.append(_Prompts(
                layers=[(layer.keys[row:row + 1, :, start:start + length],
                         layer.values[row:row + 1, :, start:start + length]) for layer in self._cache.layers],
                attention=torch.ones((1, length), dtype=torch.long),
                next_positions=torch.tensor([[length]]), logits=self._held_logits[key][None]))
        return _stack(parts)

    def _forget_held_if_weights_changed(self) -> None:
        """Held prompts were computed with other weights (an update between two steps): forget them."""
        if self._weights_version is None:
            return
        if (version := self._weights_version()) != self._held_weights:
            self._held_logits.clear()
            self._held_weights, self._epoch = version, self._epoch + 1

    def drop_finished(self) -> None:
        keep = [i for i, row in enumerate(self.rows) if not row.finished]
        if len(keep) == len(self.rows):
            return
        if not keep:
            self._clear()
            return
        index = torch.tensor(keep, dtype=torch.long)
        self._cache.batch_select_indices(index.to(_cache_device(self._cache, index)))
        self.rows = [self.rows[i] for i in keep]
        self._prompt_of = [self._prompt_of[i] for i in keep]
        if self._held_logits:
            running = {key for key, epoch in self._prompt_of if epoch == self._epoch}
            self._held_logits = {key: logits for key, logits in self._held_logits.items() if key in running}
        self._attention, self._positions = self._attention[index], self._positions[index]
        self._tokens = self._tokens[index]
        self._trim_left()

    def _trim_left(self) -> None:
        """Drop leading mask columns no remaining row attends to."""
        attended = self._attention.sum(dim=0) > 0
        first = int(attended.nonzero()[0]) if attended.any() else 0
        if first > 0:
            self._attention = self._attention[:, first:]
            for layer in self._cache.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]


def left_pad(prompts: Sequence[Sequence[int]],
             pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention mask and position ids of left-padded prompts, each [B, T]."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        if prompt:
            input_ids[i, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            attention[i, width - len(prompt):] = 1
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    return input_ids, attention, positions


def _pad_left(tensor: torch.Tensor, width: int, dim: int = 1) -> torch.Tensor:
    """Zero-pad `dim` on the left up to `width` (a mask [B, T], or keys [B, H, T, D] with dim=2)."""
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    padding = [0, 0] * (tensor.dim() - 1 - dim) + [missing, 0]
    return F.pad(tensor, padding)


def _stack(parts: list[_Prompts]) -> _Prompts:
    """Prompts of several parts in one, left-padded to the widest."""
    if len(parts) == 1:
        return parts[0]
    width = max(part.attention.shape[1] for part in parts)
    layers = [(torch.cat([_pad_left(part.layers[i][0], width, 2) for part in parts]),
               torch.cat([_pad_left(part.layers[i][1], width, 2) for part in parts]))
              for i in range(len(parts[0].layers))]
    return _Prompts(layers=layers, attention=torch.cat([_pad_left(p.attention, width) for p in parts]),
                    next_positions=torch.cat([p.next_positions for p in parts]),
                    logits=torch.cat([p.logits for p in parts]))


def _one_row_each(prompts: _Prompts, prompt_keys: list[PromptKey], row_keys: list[PromptKey]) -> _Prompts:
    """Rows of `prompts` (one per key in `prompt_keys`) repeated into one per row key."""
    if prompt_keys == row_keys:
        return prompts
    order = {key: i for i, key in enumerate(prompt_keys)}
    index = torch.tensor([order[key] for key in row_keys], dtype=torch.long)

    def pick(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.index_select(0, index.to(tensor.device))

    return _Prompts(layers=[(pick(keys), pick(values)) for keys, values in prompts.layers],
                    attention=prompts.attention[index], next_positions=prompts.next_positions[index],
                    logits=prompts.logits[index])


def _cache_of(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A cache holding these keys and values (not copied)."""
    cache = DynamicCache()
    for index, (keys, values) in enumerate(layers):
        cache.update(keys[:, :, :0], values[:, :, :0], index)  # creates the layer
        cache.layers[index].keys, cache.layers[index].values = keys, values
    return cache


def _join_caches(running: DynamicCache, new: DynamicCache, width: int) -> None:
    """Append `new`'s rows to `running`, both left-padded to `width` positions (in place)."""
    for layer, joining in zip(running.layers, new.layers, strict=True):
        layer.keys = torch.cat([_pad_left(layer.keys, width, 2), _pad_left(joining.keys, width, 2)])
        layer.values = torch.cat([_pad_left(layer.values, width, 2), _pad_left(joining.values, width, 2)])


def _cache_device(cache: DynamicCache, fallback: torch.Tensor) -> torch.device:
    layers = getattr(cache, "layers", None)
    keys = getattr(layers[0], "keys", None) if layers else None
    return keys.device if isinstance(keys, torch.Tensor) else fallback.device
