"""Elo ratings of a multi-agent job's agents, updated match by match in a fixed order."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

INITIAL_RATING = 1000.0


def expected_score(rating: float, opponent: float) -> float:
    return 1.0 / (1.0 + 10 ** ((opponent - rating) / 400.0))


def update(ratings: Mapping[str, float], result: Sequence[tuple[str, float]], k: float) -> dict[str, float]:
    """New ratings after one match; `result` is (agent, final reward) per seat. Every pair of
    seats counts as a game: the higher reward wins (1), equal rewards draw (0.5); with more than
    two seats each pair's change is scaled by 1/(seats - 1)."""
    new = dict(ratings)
    scale = 1.0 / max(1, len(result) - 1)
    for (a, reward_a), (b, reward_b) in itertools.combinations(result, 2):
        score = 1.0 if reward_a > reward_b else 0.0 if reward_a < reward_b else 0.5
        delta = k * scale * (score - expected_score(ratings[a], ratings[b]))
        new[a] += delta
        new[b] -= delta
    return new
