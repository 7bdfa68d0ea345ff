"""Job events (the domain twin of scheduler.v1.JobEvent) and their JSON form in the Redis stream.

Each stream entry has the id `<sequence>-0` and two fields: `time` (ms) and `data` (the JSON of
the payload, tagged by `kind`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from opentinker_scheduler.model import JobState, Progress, Role


@dataclass(frozen=True, kw_only=True)
class StateChanged:
    from_state: JobState
    to_state: JobState
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class MetricsReported:
    step: int = 0
    agent_id: str = ""
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class LogLine:
    level: str = "INFO"  # DEBUG, INFO, WARNING, ERROR (LogLine.Level names without prefix)
    source: str = ""
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class ProgressUpdated:
    progress: Progress


@dataclass(frozen=True, kw_only=True)
class CheckpointSaved:
    checkpoint_id: str = ""
    step: int = 0
    agent_checkpoint_ids: dict[str, str] = field(default_factory=dict)
    """Multi-agent jobs: each learning agent's checkpoint of this step."""
    driver_state: dict[str, float] = field(default_factory=dict)
    """Numbers the driver resumes with (e.g. Elo ratings)."""


@dataclass(frozen=True, kw_only=True)
class WorkerLost:
    worker_id: str
    role: Role
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class SampleTurn:
    action: str = ""
    observation: str = ""
    reward: float = 0.0
    truncated: bool = False


@dataclass(frozen=True, kw_only=True)
class EpisodeSample:
    group_id: str = ""
    prompt: str = ""
    turns: tuple[SampleTurn, ...] = ()
    reward: float = 0.0
    stop_reason: str = "UNSPECIFIED"  # common.v1.StopReason names without prefix
    correct: bool | None = None


@dataclass(frozen=True, kw_only=True)
class SamplesReported:
    """A few episodes of a step as text (train, eval or inference)."""

    step: int = 0
    split: str = ""
    agent_id: str = ""
    samples: tuple[EpisodeSample, ...] = ()


Payload = StateChanged | MetricsReported | LogLine | ProgressUpdated | CheckpointSaved | WorkerLost | SamplesReported
PAYLOAD_KINDS: dict[str, type] = {
    "state_changed": StateChanged, "metrics": MetricsReported, "log": LogLine,
    "progress": ProgressUpdated, "checkpoint": CheckpointSaved, "worker_lost": WorkerLost,
    "samples": SamplesReported,
}
KIND_OF = {cls: kind for kind, cls in PAYLOAD_KINDS.items()}


@dataclass(frozen=True, kw_only=True)
class JobEvent:
    job_id: str
    sequence: int
    time_ms: int
    payload: Payload

    @property
    def is_terminal(self) -> bool:
        """True for the StateChanged that ends the job (always its last event)."""
        return isinstance(self.payload, StateChanged) and self.payload.to_state.terminal


def encode_payload(payload: Payload) -> str:
    """JSON with a `kind` tag, e.g. {"kind": "log", "level": "INFO", ...}."""
    return json.dumps({"kind": KIND_OF[type(payload)], **dataclasses.asdict(payload)},
                      sort_keys=True)


def decode_payload(text: str | bytes) -> Payload:
    data: dict[str, Any] = json.loads(text)
    cls = PAYLOAD_KINDS[data.pop("kind")]
    if cls is StateChanged:
        return StateChanged(from_state=JobState(data["from_state"]),
                            to_state=JobState(data["to_state"]), reason=data["reason"])
    if cls is ProgressUpdated:
        return ProgressUpdated(progress=Progress(**data["progress"]))
    if cls is WorkerLost:
        return WorkerLost(worker_id=data["worker_id"], role=Role(data["role"]), reason=data["reason"])
    if cls is SamplesReported:
        return _decode_samples(data)
    return cls(**data)


def _decode_samples(data: dict[str, Any]) -> SamplesReported:
    samples = tuple(EpisodeSample(**{**sample, "turns": tuple(SampleTurn(**turn) for turn in sample["turns"])})
                    for sample in data["samples"])
    return SamplesReported(step=data["step"], split=data["split"], agent_id=data["agent_id"], samples=samples)


def decode_entry(job_id: str, entry_id: bytes, fields: dict[bytes, bytes]) -> JobEvent:
    """One XRANGE/XREAD entry -> JobEvent (the sequence is the id's first part)."""
    sequence = int(entry_id.split(b"-", 1)[0])
    return JobEvent(job_id=job_id, sequence=sequence, time_ms=int(fields[b"time"]),
                    payload=decode_payload(fields[b"data"]))


def encode_progress(progress: Progress) -> str:
    return json.dumps(dataclasses.asdict(progress), sort_keys=True)


def decode_progress(text: str | bytes | None) -> Progress:
    return Progress(**json.loads(text)) if text else Progress()
