"""Advantage estimators: pure functions over per-episode rewards.

Rewards arrive as `rewards_by_group` (group id -> rewards of that group's episodes, in
episode order); the result has the same shape. Groups are the G episodes of one problem.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import StrEnum

EPSILON = 1e-6


class Estimator(StrEnum):
    GRPO = "GRPO"
    RLOO = "RLOO"
    REINFORCE_PLUS_PLUS = "REINFORCE_PLUS_PLUS"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _std(values: Sequence[float]) -> float:
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def grpo(rewards_by_group: Mapping[str, Sequence[float]], *, normalize_by_std: bool) -> dict[str, list[float]]:
    """A_i = r_i - mean(group), divided by (std(group) + eps) when normalize_by_std."""
    result = {}
    for group, rewards in rewards_by_group.items():
        mean, scale = _mean(rewards), (_std(rewards) + EPSILON if normalize_by_std else 1.0)
        result[group] = [(r - mean) / scale for r in rewards]
    return result


def rloo(rewards_by_group: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """A_i = r_i - mean of the other episodes' rewards (0 for a group of one)."""
    result = {}
    for group, rewards in rewards_by_group.items():
        n, total = len(rewards), sum(rewards)
        result[group] = [r - (total - r) / (n - 1) if n > 1 else 0.0 for r in rewards]
    return result


def reinforce_plus_plus(rewards_by_group: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """Rewards normalised over the whole batch: (r - mean(batch)) / (std(batch) + eps)."""
    batch = [r for rewards in rewards_by_group.values() for r in rewards]
    if not batch:
        return {}
    mean, scale = _mean(batch), _std(batch) + EPSILON
    return {group: [(r - mean) / scale for r in rewards] for group, rewards in rewards_by_group.items()}


def compute(estimator: Estimator, rewards_by_group: Mapping[str, Sequence[float]], *,
            normalize_by_std: bool = False) -> dict[str, list[float]]:
    if estimator is Estimator.RLOO:
        return rloo(rewards_by_group)
    if estimator is Estimator.REINFORCE_PLUS_PLUS:
        return reinforce_plus_plus(rewards_by_group)
    return grpo(rewards_by_group, normalize_by_std=normalize_by_std)
