"""Which problems each phase plays: deterministic, disjoint train and eval streams.

Games receive `reset(index=i, split="train"|"eval")`; built-in games keep the two
splits disjoint so evaluation accuracy is held out.
"""

from __future__ import annotations

from opentinker_coordinator.types import EpisodeRequest

SEED_STRIDE = 1_000_003


def train_requests(step: int, batch_size: int, seed: int) -> list[EpisodeRequest]:
    first = step * batch_size
    return [_request("train", first + i, seed) for i in range(batch_size)]


def eval_requests(count: int, seed: int) -> list[EpisodeRequest]:
    return [_request("eval", i, seed) for i in range(count)]


def _request(split: str, index: int, seed: int) -> EpisodeRequest:
    return EpisodeRequest(group_id=f"{split}-{index}", reset_kwargs={"index": index, "split": split},
                          seed=seed * SEED_STRIDE + index)
