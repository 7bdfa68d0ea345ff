"""Turning the events a worker reports into one atomic append (events + progress + metrics)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from opentinker_runtime.edge.lease import LeaseContext
from opentinker_scheduler.errors import InvalidArgument
from opentinker_scheduler.events import (
    CheckpointSaved,
    MetricsReported,
    Payload,
    ProgressUpdated,
    SamplesReported,
    StateChanged,
    encode_progress,
)
from opentinker_scheduler.job_store import Report

MAX_EVENTS_PER_REPORT = 1000
SAMPLE_SPLITS = ("train", "eval", "inference")
MAX_SAMPLES_PER_EVENT, MAX_TURNS_PER_SAMPLE, MAX_SAMPLE_TEXT_CHARS = 16, 64, 8_000


def build_report(payloads: Sequence[Payload | None], *, lease: LeaseContext, request_id: str,
                 now_ms: int) -> Report:
    """Validate the payloads; the job's progress becomes the last ProgressUpdated, every
    MetricsReported value the metric's latest value (a multi-agent job's as "<agent>/<name>"), and the last CheckpointSaved the
    checkpoint a re-queued attempt resumes from."""
    if len(payloads) > MAX_EVENTS_PER_REPORT:
        raise InvalidArgument("events", f"at most {MAX_EVENTS_PER_REPORT} events per call")
    checked = [_checked(index, payload) for index, payload in enumerate(payloads)]
    progress = [p.progress for p in checked if isinstance(p, ProgressUpdated)]
    metrics = {f"{p.agent_id}/{name}" if p.agent_id else name: value for p in checked
               if isinstance(p, MetricsReported) for name, value in p.values.items()}
    fields: dict[str, str | int] = {}
    if progress:
        latest = progress[-1]
        fields["progress"] = encode_progress(dataclasses.replace(
            latest, update_time_ms=latest.update_time_ms or now_ms))
    checkpoints = [p for p in checked if isinstance(p, CheckpointSaved) and p.checkpoint_id]
    if checkpoints:
        last = checkpoints[-1]
        fields |= {"resume_checkpoint_id": last.checkpoint_id, "resume_step": last.step,
                   "resume_agent_checkpoints": json.dumps(last.agent_checkpoint_ids, sort_keys=True),
                   "resume_driver_state": json.dumps(last.driver_state, sort_keys=True)}
    return Report(payloads=checked, lease=lease, request_id=request_id, job_fields=fields, metrics=metrics)


def _checked(index: int, payload: Payload | None) -> Payload:
    if payload is None:
        raise InvalidArgument(f"events[{index}]", "has no payload (set metrics, log, progress, "
                              "checkpoint, worker_lost or samples)")
    if isinstance(payload, StateChanged):
        raise InvalidArgument(f"events[{index}].state_changed", "only the scheduler changes a "
                              "job's state; end a job with FinishJob")
    if isinstance(payload, SamplesReported):
        _check_samples(f"events[{index}].samples", payload)
    return payload


def _check_samples(field: str, payload: SamplesReported) -> None:
    """Samples are for reading: a few short episodes, never a copy of a whole batch."""
    if payload.split not in SAMPLE_SPLITS:
        raise InvalidArgument(f"{field}.split", f"must be one of {', '.join(SAMPLE_SPLITS)}, got {payload.split!r}")
    if payload.step < 0:
        raise InvalidArgument(f"{field}.step", f"must be >= 0, got {payload.step}")
    if len(payload.samples) > MAX_SAMPLES_PER_EVENT:
        raise InvalidArgument(f"{field}.samples", f"at most {MAX_SAMPLES_PER_EVENT} per event")
    for index, sample in enumerate(payload.samples):
        where = f"{field}.samples[{index}]"
        if len(sample.turns) > MAX_TURNS_PER_SAMPLE:
            raise InvalidArgument(f"{where}.turns", f"at most {MAX_TURNS_PER_SAMPLE} per sample")
        texts = {"prompt": sample.prompt, **{f"turns[{i}].{name}": getattr(turn, name) for i, turn in
                                             enumerate(sample.turns) for name in ("action", "observation")}}
        for name, text in texts.items():
            if len(text) > MAX_SAMPLE_TEXT_CHARS:
                raise InvalidArgument(f"{where}.{name}", f"at most {MAX_SAMPLE_TEXT_CHARS} characters")


DEFAULT_SAMPLES_PAGE, MAX_SAMPLES_PAGE = 20, 200


def check_samples_query(*, step: int | None, split: str, page_size: int) -> int:
    """ListJobSamples' filters checked; the number of events to return."""
    if step is not None and step < 0:
        raise InvalidArgument("step", f"must be >= 0, got {step}")
    if split and split not in SAMPLE_SPLITS:
        raise InvalidArgument("split", f"must be empty or one of {', '.join(SAMPLE_SPLITS)}, got {split!r}")
    if page_size < 0:
        raise InvalidArgument("page_size", f"must be >= 0, got {page_size}")
    return min(page_size or DEFAULT_SAMPLES_PAGE, MAX_SAMPLES_PAGE)
