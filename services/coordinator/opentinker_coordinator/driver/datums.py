"""Turn finished trajectories into training datums with per-token advantages."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from opentinker_coordinator.driver import advantages
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


def action_runs(loss_mask: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of sampled tokens: one per turn that sampled any
    (observation tokens, mask 0, always separate two turns)."""
    runs: list[tuple[int, int]] = []
    start = None
    for index, flag in enumerate([*loss_mask, 0]):
        if flag and start is None:
            start = index
        elif not flag and start is not None:
            runs.append((start, index))
            start = None
    return runs


def turn_rewards(trajectory: Trajectory, runs: Sequence[tuple[int, int]]) -> list[float]:
    """Each turn's reward: the token rewards inside its run (Rollout puts a turn's reward on
    its last sampled token); whatever total_reward has beyond them goes to the last turn."""
    token_rewards = trajectory.token_rewards
    rewards = [sum(token_rewards[start:end]) for start, end in runs] if token_rewards else [0.0] * len(runs)
    if rewards:
        rewards[-1] += trajectory.total_reward - sum(rewards)
    return rewards


def per_turn_datums(trajectories: Sequence[Trajectory], *, gamma: float, normalize_by_std: bool) -> list[Datum]:
    """DISCOUNTED_RETURN: each turn's tokens carry that turn's advantage (see
    advantages.per_turn_grpo); environment failures and empty trajectories are left out."""
    kept = [t for t in trajectories if not t.failed and t.sampled_tokens > 0]
    runs = [action_runs(t.loss_mask) for t in kept]
    returns_by_group: dict[str, list[list[float]]] = defaultdict(list)
    for trajectory, turns in zip(kept, runs, strict=True):
        returns_by_group[trajectory.group_id].append(
            advantages.discounted_returns(turn_rewards(trajectory, turns), gamma))
    by_group = advantages.per_turn_grpo(returns_by_group, normalize_by_std=normalize_by_std)
    cursors: dict[str, int] = defaultdict(int)
    datums = []
    for trajectory, turns in zip(kept, runs, strict=True):
        turn_advantages = by_group[trajectory.group_id][cursors[trajectory.group_id]]
        cursors[trajectory.group_id] += 1
        token_advantages = [0.0] * len(trajectory.token_ids)
        for (start, end), advantage in zip(turns, turn_advantages, strict=True):
            token_advantages[start:end] = [advantage] * (end - start)
        datums.append(replace(to_datum(trajectory, 0.0), advantages=token_advantages))
    return datums


def rl_datums(trajectories: Sequence[Trajectory], estimator: advantages.Estimator,
              *, normalize_by_std: bool, gamma: float = 1.0) -> list[Datum]:
    """Datums of every trainable trajectory that sampled at least one token."""
    if estimator is advantages.Estimator.DISCOUNTED_RETURN:
        return per_turn_datums(trajectories, gamma=gamma, normalize_by_std=normalize_by_std)
    advs = trajectory_advantages(trajectories, estimator, normalize_by_std=normalize_by_std)
    return [to_datum(t, a) for t, a in zip(trajectories, advs, strict=True)
            if a is not None and t.sampled_tokens > 0]
