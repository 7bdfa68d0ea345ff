"""Metrics of a batch of trajectories (reward, accuracy, tokens, failures)."""

from __future__ import annotations

from collections.abc import Sequence

from opentinker_coordinator.types import Trajectory


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def episode_metrics(trajectories: Sequence[Trajectory], prefix: str = "") -> dict[str, float]:
    """reward/mean, accuracy, response length, env error count over the batch."""
    ok = [t for t in trajectories if not t.failed]
    verdicts = [1.0 if t.correct else 0.0 for t in ok if t.correct is not None]
    values = {
        "episodes": float(len(trajectories)),
        "env_errors": float(len(trajectories) - len(ok)),
        "reward/mean": _mean([t.total_reward for t in ok]),
        "response_tokens/mean": _mean([float(t.sampled_tokens) for t in ok]),
    }
    if verdicts:
        values["accuracy"] = _mean(verdicts)
    return {f"{prefix}{name}": value for name, value in values.items()}
