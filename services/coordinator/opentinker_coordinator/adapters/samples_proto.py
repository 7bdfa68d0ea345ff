"""Trajectories -> scheduler.v1.SamplesReported: the text of a few episodes, each text clipped."""

from __future__ import annotations

from collections.abc import Sequence

from opentinker_api.common.v1 import trajectory_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_coordinator.types import Trajectory

MAX_TEXT_CHARS = 4_000
MAX_TURNS = 64


def clipped(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text`, or its first `limit` characters and how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}[... {len(text) - limit} more characters]"


def samples_message(step: int, split: str, trajectories: Sequence[Trajectory],
                    agent_id: str = "") -> job_pb2.SamplesReported:
    return job_pb2.SamplesReported(step=step, split=split, agent_id=agent_id,
                                   samples=[_sample(t) for t in trajectories])


def _sample(trajectory: Trajectory) -> job_pb2.EpisodeSample:
    sample = job_pb2.EpisodeSample(
        group_id=trajectory.group_id, prompt=clipped(trajectory.prompt_text), reward=trajectory.total_reward,
        stop_reason=trajectory_pb2.StopReason.Value(f"STOP_REASON_{trajectory.stop_reason}"),
        turns=[job_pb2.SampleTurn(action=clipped(turn.get("action", "")),
                                  observation=clipped(turn.get("observation", "") or trajectory.env_error),
                                  reward=turn.get("reward", 0.0), truncated=bool(turn.get("truncated")))
               for turn in trajectory.transcript[:MAX_TURNS]])
    if trajectory.correct is not None:
        sample.correct = trajectory.correct
    return sample
