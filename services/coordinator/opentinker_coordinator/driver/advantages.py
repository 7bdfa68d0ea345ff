"""Advantage estimators: pure functions over per-episode rewards.

Rewards arrive as `rewards_by_group` (group id -> rewards of that group's episodes, in
episode order); the result has the same shape. Groups are the G episodes of one problem.

DISCOUNTED_RETURN works per turn instead: `turn_returns_by_group` maps a group to each
episode's list of per-turn returns G_k = r_k + gamma * G_(k+1), and `per_turn_grpo` gives
every turn its own advantage, so a multi-turn game's dense rewards credit the turn that
earned them rather than the whole episode.
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
    DISCOUNTED_RETURN = "DISCOUNTED_RETURN"


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


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_k = r_k + gamma * G_(k+1) for each turn k (G of the last turn = its own reward)."""
    returns, following = [0.0] * len(rewards), 0.0
    for k in range(len(rewards) - 1, -1, -1):
        following = rewards[k] + gamma * following
        returns[k] = following
    return returns


def per_turn_grpo(turn_returns_by_group: Mapping[str, Sequence[Sequence[float]]], *,
                  normalize_by_std: bool) -> dict[str, list[list[float]]]:
    """Turn k's advantage: its return minus the mean return at turn k over the group's
    episodes that reached turn k (divided by their std + eps when normalize_by_std).

    Turn 0 is thus GRPO on the whole (discounted) episode return; a later turn is compared
    with the other episodes' same turn, so what it did there, not the luck of earlier turns,
    decides its sign. A turn only one episode of the group reached gets 0, like a group of one.
    """
    result = {}
    for group, episodes in turn_returns_by_group.items():
        by_turn: dict[int, list[float]] = {}
        for returns in episodes:
            for k, value in enumerate(returns):
                by_turn.setdefault(k, []).append(value)
        stats = {k: (_mean(v), _std(v) + EPSILON if normalize_by_std else 1.0) for k, v in by_turn.items()}
        result[group] = [[(value - stats[k][0]) / stats[k][1] for k, value in enumerate(returns)]
                         for returns in episodes]
    return result


def compute(estimator: Estimator, rewards_by_group: Mapping[str, Sequence[float]], *,
            normalize_by_std: bool = False) -> dict[str, list[float]]:
    if estimator is Estimator.RLOO:
        return rloo(rewards_by_group)
    if estimator is Estimator.REINFORCE_PLUS_PLUS:
        return reinforce_plus_plus(rewards_by_group)
    if estimator is Estimator.DISCOUNTED_RETURN:
        raise ValueError("DISCOUNTED_RETURN advantages are per turn: use per_turn_grpo")
    return grpo(rewards_by_group, normalize_by_std=normalize_by_std)
