"""The numeric values a game reports in its steps' `info`, kept for the `env/<key>` metrics.

A game is user code: its keys and values are untrusted. Only top-level values that are finite
numbers or bools (as 0/1) count; a key must be a short metric-safe name (letters, digits and
`_ . - /`, at most MAX_KEY_CHARS); a trajectory keeps at most MAX_KEYS keys (the first seen), a
batch's metrics at most MAX_KEYS too (`env_metrics`), so a game cannot flood a job's metrics.
The keys that name which episode was played (EPISODE_IDENTITY: `index`, `split`, `seed`) are not
metrics: their means say nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

MAX_KEYS = 32
MAX_KEY_CHARS = 64
METRIC_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*")
PREFIX = "env/"
EPISODE_IDENTITY = frozenset({"index", "split", "seed"})


class HasEnvValues(Protocol):
    env_values: Mapping[str, Sequence[float]]


def numeric_info_values(infos: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Each key's numeric values over the turns' infos, in turn order."""
    values: dict[str, list[float]] = {}
    for info in infos:
        for key, value in info.items():
            number = _number(value)
            if number is None or not _metric_key(key):
                continue
            if key in values:
                values[key].append(number)
            elif len(values) < MAX_KEYS:
                values[key] = [number]
    return values


def env_metrics(trajectories: Sequence[HasEnvValues]) -> dict[str, float]:
    """`env/<key>`: the mean of every value of `key` reported in the batch's turns."""
    pooled: dict[str, list[float]] = {}
    for trajectory in trajectories:
        for key, numbers in trajectory.env_values.items():
            if key in pooled:
                pooled[key].extend(numbers)
            elif len(pooled) < MAX_KEYS:
                pooled[key] = list(numbers)
    return {f"{PREFIX}{key}": sum(numbers) / len(numbers) for key, numbers in pooled.items() if numbers}


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _metric_key(key: Any) -> bool:
    return (isinstance(key, str) and len(key) <= MAX_KEY_CHARS and key not in EPISODE_IDENTITY
            and METRIC_KEY.fullmatch(key) is not None)
