"""Turning the events a worker reports into one atomic append (events + progress + metrics)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from opentinker_scheduler.errors import InvalidArgument
from opentinker_scheduler.events import CheckpointSaved, MetricsReported, Payload, ProgressUpdated, StateChanged, encode_progress
from opentinker_scheduler.job_store import Report
from opentinker_scheduler.model import LeaseContext

MAX_EVENTS_PER_REPORT = 1000


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
                              "checkpoint or worker_lost)")
    if isinstance(payload, StateChanged):
        raise InvalidArgument(f"events[{index}].state_changed", "only the scheduler changes a "
                              "job's state; end a job with FinishJob")
    return payload
