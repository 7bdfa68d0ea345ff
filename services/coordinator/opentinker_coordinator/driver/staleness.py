"""How stale a trajectory is, and when an agent's Rollout may start a step's batch.

Step s (0-based) trains the batch of step s into the weights of s + 1 optimizer steps. The
Rollout numbers its weights by `policy_version` (bumped by every UpdateWeights, so a version is
not a step count: a restored checkpoint or a skipped non-finite update shifts them), and each
trajectory carries the version of its oldest turn. `PolicyClock` maps the versions this job
pushed to the optimizer steps they contain, so

    staleness(trajectory, s) = s - steps in the weights that sampled its oldest turn

is 0 for a synchronous job. With max_staleness k the Rollout may start the batch of step s once
its weights contain at least s - k steps (`wait_until_ready`), so every token of that batch is at
most k versions stale when step s trains on it; `split_stale` drops what is not (a trajectory
sampled by weights this clock never pushed, e.g. a restarted Rollout's base weights).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from opentinker_coordinator.types import Trajectory


@dataclass(frozen=True, kw_only=True)
class AsyncSettings:
    """JobSpec.async: 0 = synchronous (rollout -> update -> weight sync, one after another)."""

    max_staleness: int = 0
    finish_on_old_weights: bool = True
    """True: the Rollout takes new weights only between two batches (every episode of a batch is
    played by one version); False: as soon as they are trained (between two decode steps)."""

    @property
    def synchronous(self) -> bool:
        return self.max_staleness == 0


class PolicyClock:
    """One agent's policy versions: steps trained, steps in the Rollout's weights, and who waits."""

    def __init__(self, start_step: int, rollout_version: int | None = 0) -> None:
        """`rollout_version`: the version the Rollout samples with now, holding `start_step` steps
        (0 on a fresh policy); None when unknown (a resumed attempt, until it pushes its weights)."""
        self.trained_steps = start_step
        """Optimizer steps in the Trainer's weights."""
        known = rollout_version is not None
        self.rollout_steps = start_step if known else -1
        """Optimizer steps in the Rollout's weights (-1: unknown until the restored weights are pushed)."""
        self.ready_steps = start_step
        """Steps the consumer has finished (its barriers passed): the gate of the next batches."""
        self._steps_of_version: dict[int, int] = {rollout_version: start_step} if known else {}
        self._changed = asyncio.Condition()

    async def trained(self, steps: int) -> None:
        async with self._changed:
            self.trained_steps = steps
            self._changed.notify_all()

    async def synced(self, version: int, steps: int) -> None:
        """The Rollout now samples with `version`, the weights of `steps` optimizer steps."""
        async with self._changed:
            self._steps_of_version[version] = steps
            self.rollout_steps = max(self.rollout_steps, steps)
            self._changed.notify_all()

    async def finished_step(self, steps: int) -> None:
        async with self._changed:
            self.ready_steps = max(self.ready_steps, steps)
            self._changed.notify_all()

    def weights_pending(self) -> bool:
        return self.trained_steps > self.rollout_steps

    async def wait_until(self, predicate) -> None:  # noqa: ANN001 - a () -> bool on this clock
        async with self._changed:
            await self._changed.wait_for(predicate)

    def steps_in(self, version: int) -> int | None:
        return self._steps_of_version.get(version)

    def staleness(self, trajectory: Trajectory, step: int) -> int | None:
        """How many versions behind step `step` the trajectory's oldest turn is (None: unknown weights)."""
        steps = self.steps_in(trajectory.policy_version)
        return None if steps is None else step - steps


@dataclass(frozen=True, kw_only=True)
class StalenessSplit:
    fresh: list[Trajectory]
    stale: list[Trajectory]
    staleness: list[int]
    """Of each fresh trajectory that sampled tokens."""


def split_stale(trajectories: Sequence[Trajectory], clock: PolicyClock, step: int, max_staleness: int) -> StalenessSplit:
    """Keep what step `step` may train on: failed episodes pass through (they train on nothing)."""
    fresh, stale, ages = [], [], []
    for trajectory in trajectories:
        if trajectory.failed:
            fresh.append(trajectory)
            continue
        age = clock.staleness(trajectory, step)
        if age is None or age > max_staleness:
            stale.append(trajectory)
        else:
            fresh.append(trajectory)
            ages.append(age)
    return StalenessSplit(fresh=fresh, stale=stale, staleness=ages)


def staleness_metrics(split: StalenessSplit) -> dict[str, float]:
    ages = split.staleness
    return {"async/staleness_mean": sum(ages) / len(ages) if ages else 0.0,
            "async/staleness_max": float(max(ages, default=0)),
            "async/stale_dropped": float(len(split.stale))}
