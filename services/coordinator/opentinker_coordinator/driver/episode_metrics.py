"""Metrics of a batch of trajectories (reward, accuracy, tokens, failures, the game's own)."""

from __future__ import annotations

from collections.abc import Sequence

from opentinker_coordinator.env_values import env_metrics
from opentinker_coordinator.types import StopReason, Trajectory

CUT_BY_A_LIMIT = (StopReason.MAX_TURN_TOKENS, StopReason.MAX_TOTAL_TOKENS, StopReason.CONTEXT_LENGTH)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def episode_metrics(trajectories: Sequence[Trajectory], prefix: str = "") -> dict[str, float]:
    """reward/mean, accuracy, response length, env error count, the share of episodes with an
    action a token limit cut off (`truncated`: judged by the game, or ending the episode; a
    policy drifting into replies that never end shows here first) and `env/<key>`, the mean of
    each numeric `info` value the game reported in the batch's turns.

    `accuracy` is over every episode the environment did not fail, once the game judges any
    (`info["correct"]` on a last turn): an episode it never judged (cut off by a token limit,
    out of turns) counts as wrong, so cutting replies off cannot raise it; `judged` is the share
    of those episodes the game judged."""
    ok = [t for t in trajectories if not t.failed]
    judged = [t for t in ok if t.correct is not None]
    values = {
        "episodes": float(len(trajectories)),
        "env_errors": float(len(trajectories) - len(ok)),
        "reward/mean": _mean([t.total_reward for t in ok]),
        "response_tokens/mean": _mean([float(t.sampled_tokens) for t in ok]),
        "truncated": _mean([1.0 if _cut(t) else 0.0 for t in trajectories]),
    }
    values |= env_metrics(ok)
    if judged:
        values["accuracy"] = sum(1.0 for t in judged if t.correct) / len(ok)
        values["judged"] = len(judged) / len(ok)
    return {f"{prefix}{name}": value for name, value in values.items()}


def _cut(trajectory: Trajectory) -> bool:
    return trajectory.truncated_turns > 0 or trajectory.stop_reason in CUT_BY_A_LIMIT


def accuracy_summary(metrics: dict[str, float], prefix: str = "eval/") -> str | None:
    """What an evaluation measured, for a job's final status message ("accuracy 0.250 over 64
    episodes; 6 cut off by a token limit; 4 not judged, counted wrong"); None when the game
    judged nothing. A cut-off reply the game judged (`on_truncated`) counts by its verdict."""
    accuracy = metrics.get(f"{prefix}accuracy")
    if accuracy is None:
        return None
    episodes = round(metrics.get(f"{prefix}episodes", 0.0))
    failed = round(metrics.get(f"{prefix}env_errors", 0.0))
    cut = round(metrics.get(f"{prefix}truncated", 0.0) * episodes)
    unjudged = round((1.0 - metrics.get(f"{prefix}judged", 1.0)) * (episodes - failed))
    parts = [f"accuracy {accuracy:.3f} over {episodes - failed} episodes"]
    if cut:
        parts.append(f"{cut} cut off by a token limit")
    if unjudged:
        parts.append(f"{unjudged} not judged, counted wrong")
    if failed:
        parts.append(f"{failed} failed by the environment, left out")
    return "; ".join(parts)
