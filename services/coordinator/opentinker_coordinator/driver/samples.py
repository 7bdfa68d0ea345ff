"""Which episodes a job shows a person as samples of a step (SamplesReported events)."""

from __future__ import annotations

from collections.abc import Sequence

from opentinker_coordinator.types import Trajectory

SAMPLES_PER_REPORT = 4


def pick_samples(trajectories: Sequence[Trajectory], count: int = SAMPLES_PER_REPORT) -> list[Trajectory]:
    """Up to `count` episodes, one per problem (group) first, in the order they came; an episode
    the environment failed only when nothing else is left (its error is in the job's log)."""
    played = [t for t in trajectories if not t.failed]
    firsts, rest, seen = [], [], set()
    for trajectory in played:
        (rest if trajectory.group_id in seen else firsts).append(trajectory)
        seen.add(trajectory.group_id)
    return ([*firsts, *rest, *(t for t in trajectories if t.failed)])[:count]
