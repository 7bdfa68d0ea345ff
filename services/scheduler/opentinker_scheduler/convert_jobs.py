"""Protobuf <-> domain for jobs, specs and events.

The JobSpec crosses into the domain twice: resolved, as `JobSpecFacts` (its plan, which the
scheduler schedules on, and what it checks against its state) and as its deterministic
serialization (`spec_blob`, stored and returned as is).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from opentinker_api.common.v1 import progress_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.jobplan import ResolveError, resolve_job_plan
from opentinker_runtime.jobplan.resolve_training import output_file
from opentinker_scheduler.convert_common import enum_from_proto, enum_to_proto, milliseconds_from_proto, timestamp
from opentinker_scheduler.convert_samples import samples_from_proto, samples_to_proto
from opentinker_scheduler.convert_workers import assignment_to_proto, role_from_proto, role_to_proto
from opentinker_scheduler.errors import InvalidArgument
from opentinker_scheduler.events import (
    CheckpointSaved,
    JobEvent,
    LogLine,
    MetricsReported,
    Payload,
    ProgressUpdated,
    SamplesReported,
    StateChanged,
    WorkerLost,
)
from opentinker_scheduler.model import CheckpointRef, EnvHostField, Job, JobSpecFacts, JobState, JobType, Progress
from opentinker_scheduler.spec_facts import spec_facts


def spec_blob(spec: job_pb2.JobSpec) -> bytes:
    """Deterministic bytes: equal specs give equal blobs (idempotent SubmitJob compares them)."""
    return spec.SerializeToString(deterministic=True)


def facts_from_spec(spec: job_pb2.JobSpec) -> JobSpecFacts:
    """The spec resolved (`opentinker_runtime.jobplan`). A spec that does not resolve keeps its
    problem, INVALID_ARGUMENT naming the field the resolver named, for `JobService.submit` to raise
    once it has judged who may set the spec's EnvHost addresses (read here from the spec itself)."""
    addresses = tuple(envhost_fields(spec))
    try:
        plan = resolve_job_plan(spec)
    except ResolveError as error:
        return JobSpecFacts(plan=None, envhost_fields=addresses, problem=InvalidArgument(error.field, error.message))
    return spec_facts(plan, addresses)


def envhost_fields(spec: job_pb2.JobSpec) -> Iterator[EnvHostField]:
    """Every EnvHost the spec's environments name (envhost_address or envhost)."""
    for path, environment in (("spec.environment", spec.environment),
                              ("spec.multi_agent.eval_environment", spec.multi_agent.eval_environment)):
        for kind in ("envhost_address", "envhost"):
            if value := getattr(environment, kind):
                yield EnvHostField(path=f"{path}.{kind}", kind=kind, value=value)


def stored_spec_facts(blob: bytes) -> JobSpecFacts:
    """The facts of a stored job's spec (`Job.spec_blob`, valid when it was submitted); its problem
    raised when it no longer resolves (stored by an older version)."""
    facts = facts_from_spec(job_pb2.JobSpec.FromString(blob))
    facts.raise_problem()
    return facts


def inference_output_of(job: Job) -> str | None:
    """Where an INFERENCE job writes (its spec's output_path, else the default file name, relative
    to its tenant's outputs/); None for other jobs."""
    if job.type is not JobType.INFERENCE:
        return None
    return output_file(job_pb2.JobSpec.FromString(job.spec_blob).inference.output_path, job.job_id)


def job_type_from_proto(value: int, *, field: str) -> JobType:
    return enum_from_proto(JobType, job_pb2.JobType, "JOB_TYPE_", value, field=field)


def state_from_proto(value: int, *, field: str) -> JobState:
    return enum_from_proto(JobState, job_pb2.Job.State, "STATE_", value, field=field)


def state_to_proto(state: JobState) -> int:
    return enum_to_proto(job_pb2.Job.State, "STATE_", state)


def job_to_proto(job: Job, *, job_token: str = "") -> job_pb2.Job:
    """`job_token` goes into every assignment: only for GetJob with an admin key."""
    return job_pb2.Job(
        job_id=job.job_id, tenant_id=job.tenant_id, spec=job_pb2.JobSpec.FromString(job.spec_blob),
        state=state_to_proto(job.state), create_time=timestamp(job.create_time_ms),
        update_time=timestamp(job.update_time_ms), start_time=timestamp(job.start_time_ms),
        end_time=timestamp(job.end_time_ms), progress=progress_to_proto(job.progress),
        status_message=job.status_message, queue_position=job.queue_position, attempt=job.attempt,
        assignments=[assignment_to_proto(a, job_token=job_token) for a in job.assignments],
        last_event_sequence=job.last_event_sequence, cancel_requested=job.cancel_requested,
        resume_from=_checkpoint_to_proto(job.resume_from), retries_left=job.retries_left)


def _checkpoint_to_proto(checkpoint: CheckpointRef | None) -> job_pb2.CheckpointSaved | None:
    if checkpoint is None:
        return None
    return job_pb2.CheckpointSaved(checkpoint_id=checkpoint.checkpoint_id, step=checkpoint.step,
                                   agent_checkpoint_ids=checkpoint.agent_checkpoint_ids,
                                   driver_state=checkpoint.driver_state)


def progress_to_proto(progress: Progress) -> progress_pb2.JobProgress:
    return progress_pb2.JobProgress(
        phase=progress_pb2.Phase.Value(f"PHASE_{progress.phase}"), step=progress.step,
        total_steps=progress.total_steps, phase_done=progress.phase_done,
        phase_total=progress.phase_total, last_checkpoint_id=progress.last_checkpoint_id,
        update_time=timestamp(progress.update_time_ms), latest_metrics=progress.latest_metrics)


def _name_or(enum_type: Any, value: int, prefix: str, default: str) -> str:
    """The value's name without prefix; `default` for numbers newer than our protos."""
    try:
        name = enum_type.Name(value).removeprefix(prefix)
    except ValueError:
        return default
    return default if name == "UNSPECIFIED" else name


def progress_from_proto(progress: progress_pb2.JobProgress, *, field: str = "progress") -> Progress:
    phase = _name_or(progress_pb2.Phase, progress.phase, "PHASE_", "UNSPECIFIED")
    update_time_ms = (milliseconds_from_proto(progress.update_time, field=f"{field}.update_time")
                      if progress.HasField("update_time") else 0)
    return Progress(phase=phase, step=progress.step, total_steps=progress.total_steps,
                    phase_done=progress.phase_done, phase_total=progress.phase_total,
                    last_checkpoint_id=progress.last_checkpoint_id, update_time_ms=update_time_ms,
                    latest_metrics=dict(progress.latest_metrics))


def event_to_proto(event: JobEvent) -> job_pb2.JobEvent:
    message = job_pb2.JobEvent(job_id=event.job_id, sequence=event.sequence,
                               time=timestamp(event.time_ms))
    _set_payload(message, event.payload)
    return message


def _set_payload(message: job_pb2.JobEvent, payload: Payload) -> None:
    if isinstance(payload, StateChanged):
        message.state_changed.CopyFrom(job_pb2.StateChanged(
            from_state=state_to_proto(payload.from_state), to_state=state_to_proto(payload.to_state),
            reason=payload.reason))
    elif isinstance(payload, MetricsReported):
        message.metrics.CopyFrom(job_pb2.MetricsReported(step=payload.step, agent_id=payload.agent_id,
                                                         values=payload.values))
    elif isinstance(payload, LogLine):
        message.log.CopyFrom(job_pb2.LogLine(level=job_pb2.LogLine.Level.Value(f"LEVEL_{payload.level}"),
                                             source=payload.source, message=payload.message))
    elif isinstance(payload, ProgressUpdated):
        message.progress.CopyFrom(job_pb2.ProgressUpdated(progress=progress_to_proto(payload.progress)))
    elif isinstance(payload, CheckpointSaved):
        message.checkpoint.CopyFrom(job_pb2.CheckpointSaved(agent_checkpoint_ids=payload.agent_checkpoint_ids,
                                                            driver_state=payload.driver_state,
                                                            checkpoint_id=payload.checkpoint_id,
                                                            step=payload.step))
    elif isinstance(payload, SamplesReported):
        message.samples.CopyFrom(samples_to_proto(payload))
    else:
        message.worker_lost.CopyFrom(job_pb2.WorkerLost(worker_id=payload.worker_id,
                                                        role=role_to_proto(payload.role), reason=payload.reason))


def payload_from_proto(event: job_pb2.JobEvent, *, field: str) -> Payload | None:
    """The domain payload of a reported event; None when no payload is set."""
    kind = event.WhichOneof("payload")
    if kind == "metrics":
        return MetricsReported(step=event.metrics.step, agent_id=event.metrics.agent_id,
                               values=dict(event.metrics.values))
    if kind == "log":
        level = _name_or(job_pb2.LogLine.Level, event.log.level, "LEVEL_", "INFO")
        return LogLine(level=level, source=event.log.source,
                       message=event.log.message)
    if kind == "progress":
        return ProgressUpdated(progress=progress_from_proto(event.progress.progress,
                                                            field=f"{field}.progress.progress"))
    if kind == "checkpoint":
        return CheckpointSaved(checkpoint_id=event.checkpoint.checkpoint_id, step=event.checkpoint.step,
                               agent_checkpoint_ids=dict(event.checkpoint.agent_checkpoint_ids),
                               driver_state=dict(event.checkpoint.driver_state))
    if kind == "worker_lost":
        return WorkerLost(worker_id=event.worker_lost.worker_id, reason=event.worker_lost.reason,
                          role=role_from_proto(event.worker_lost.role, field=f"{field}.worker_lost.role"))
    if kind == "samples":
        return samples_from_proto(event.samples)
    if kind == "state_changed":
        return StateChanged(from_state=state_from_proto(event.state_changed.from_state, field=field),
                            to_state=state_from_proto(event.state_changed.to_state, field=field))
    return None
