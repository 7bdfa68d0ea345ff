"""Turn finished trajectories into training datums with per-token advantages."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from opentinker_coordinator import advantages
from opentinker_coordinator.types import Datum, Trajectory


def group_rewards(trajectories: Sequence[Trajectory]) -> dict[str, list[float]]:
    """Rewards of the trainable (non-failed) trajectories by group, in order."""
    groups: dict[str, list[float]] = defaultdict(list)
    for trajectory in trajectories:
        if not trajectory.failed:
            groups[trajectory.group_id].append(trajectory.total_reward)
    return dict(groups)


def trajectory_advantages(trajectories: Sequence[Trajectory], estimator: advantages.Estimator,
                          *, normalize_by_std: bool) -> list[float | None]:
    """One advantage per trajectory (None for environment failures, which are not trained)."""
    by_group = advantages.compute(estimator, group_rewards(trajectories), normalize_by_std=normalize_by_std)
    cursors: dict[str, int] = defaultdict(int)
    result: list[float | None] = []
    for trajectory in trajectories:
        if trajectory.failed:
            result.append(None)
            continue
        result.append(by_group[trajectory.group_id][cursors[trajectory.group_id]])
        cursors[trajectory.group_id] += 1
    return result


def to_datum(trajectory: Trajectory, advantage: float) -> Datum:
    """Sequence-level advantage placed on every sampled token (mask 1), 0 elsewhere."""
    return Datum(
        tokens=list(trajectory.token_ids),
        loss_mask=[float(m) for m in trajectory.loss_mask],
        advantages=[advantage * m for m in trajectory.loss_mask],
        sampling_logprobs=list(trajectory.sampling_logprobs),
        group_id=trajectory.group_id,
    )


def rl_datums(trajectories: Sequence[Trajectory], estimator: advantages.Estimator,
              *, normalize_by_std: bool) -> list[Datum]:
    """Datums of every trainable trajectory that sampled at least one token."""
    advs = trajectory_advantages(trajectories, estimator, normalize_by_std=normalize_by_std)
    return [to_datum(t, a) for t, a in zip(trajectories, advs, strict=True)
            if a is not None and t.sampled_tokens > 0]
