"""The running batch of a transformers engine: rows join between decoding steps (continuous batching).

A `DecodeBatch` holds the rows being decoded, their KV cache (`DynamicCache`, left-padded
to a common length), attention mask [B, T], the position of each row's next input [B, 1]
and that input, the token each row sampled last [B]. One `advance` does, in order:

1. decode: the running rows feed their last token (one forward of [B, 1]) and sample;
2. admit: new rows are prefilled together (their left-padded prompts, a fresh cache) and
   sample their first token, then join: both caches and masks are left-padded to the longer
   of the two and concatenated along the batch;
3. drop: finished rows leave the batch and the cache, and mask columns that no row attends
   to any more (left padding of rows that left) are trimmed away.

So a row that finishes frees its place at once and a request that arrives while others decode
starts at the next step, instead of waiting for the longest row of a whole batch. Rows compute
what they would alone: padding is masked and position ids count real tokens only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


class DecodeBatch:
    """Rows decoding together; new rows join between steps."""

    def __init__(self, forward: Forward, sample: Sample, pad_id: int) -> None:
        self._forward = forward
        self._sample = sample
        self._pad_id = pad_id
        self._clear()

    def _clear(self) -> None:
        self.rows: list[DecodeRow] = []
        self._cache: DynamicCache | None = None
        self._attention = torch.zeros((0, 0), dtype=torch.long)
        self._positions = torch.zeros((0, 1), dtype=torch.long)
        self._tokens = torch.zeros((0,), dtype=torch.long)

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
        input_ids, attention, positions = left_pad([r.prompt_ids for r in rows], self._pad_id)
        cache = DynamicCache()
        logits = self._forward(input_ids, attention, positions, cache, rows)
        tokens = self._sample(rows, logits)
        next_positions = positions[:, -1:] + 1
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


def _join_caches(running: DynamicCache, new: DynamicCache, width: int) -> None:
    """Append `new`'s rows to `running`, both left-padded to `width` positions (in place)."""
    for layer, joining in zip(running.layers, new.layers, strict=True):
        layer.keys = torch.cat([_pad_left(layer.keys, width, 2), _pad_left(joining.keys, width, 2)])
        layer.values = torch.cat([_pad_left(layer.values, width, 2), _pad_left(joining.values, width, 2)])


def _cache_device(cache: DynamicCache, fallback: torch.Tensor) -> torch.device:
    layers = getattr(cache, "layers", None)
    keys = getattr(layers[0], "keys", None) if layers else None
    return keys.device if isinstance(keys, torch.Tensor) else fallback.device
