"""SamplesReported <-> scheduler.v1.SamplesReported: episodes as text a person reads."""

from __future__ import annotations

from opentinker_api.common.v1 import trajectory_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_scheduler.events import EpisodeSample, SampleTurn, SamplesReported


def samples_to_proto(payload: SamplesReported) -> job_pb2.SamplesReported:
    return job_pb2.SamplesReported(step=payload.step, split=payload.split, agent_id=payload.agent_id,
                                   samples=[_sample_to_proto(sample) for sample in payload.samples])


def _sample_to_proto(sample: EpisodeSample) -> job_pb2.EpisodeSample:
    message = job_pb2.EpisodeSample(
        group_id=sample.group_id, prompt=sample.prompt, reward=sample.reward,
        stop_reason=trajectory_pb2.StopReason.Value(f"STOP_REASON_{sample.stop_reason}"),
        turns=[job_pb2.SampleTurn(action=t.action, observation=t.observation, reward=t.reward,
                                  truncated=t.truncated) for t in sample.turns])
    if sample.correct is not None:
        message.correct = sample.correct
    return message


def samples_from_proto(message: job_pb2.SamplesReported) -> SamplesReported:
    return SamplesReported(step=message.step, split=message.split, agent_id=message.agent_id,
                           samples=tuple(_sample_from_proto(sample) for sample in message.samples))


def _sample_from_proto(sample: job_pb2.EpisodeSample) -> EpisodeSample:
    reason = trajectory_pb2.StopReason.Name(sample.stop_reason) if sample.stop_reason in \
        trajectory_pb2.StopReason.values() else "STOP_REASON_UNSPECIFIED"
    return EpisodeSample(
        group_id=sample.group_id, prompt=sample.prompt, reward=sample.reward,
        stop_reason=reason.removeprefix("STOP_REASON_"),
        correct=sample.correct if sample.HasField("correct") else None,
        turns=tuple(SampleTurn(action=t.action, observation=t.observation, reward=t.reward, truncated=t.truncated)
                    for t in sample.turns))
