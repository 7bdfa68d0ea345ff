"""Protobuf <-> domain for jobs, specs and events.

The JobSpec crosses into the domain twice: as `JobSpecFacts` (what the scheduler validates and
schedules on) and as its deterministic serialization (`spec_blob`, stored and returned as is).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from opentinker_api.common.v1 import algorithm_pb2, environment_pb2, progress_pb2, resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_scheduler.convert_common import enum_from_proto, enum_to_proto, milliseconds_from_proto, timestamp
from opentinker_scheduler.convert_samples import samples_from_proto, samples_to_proto
from opentinker_scheduler.convert_workers import assignment_to_proto, role_from_proto, role_to_proto
from opentinker_scheduler.errors import InvalidArgument
from opentinker_scheduler import convert_spec_paths as spec_paths
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
from opentinker_scheduler.model import (
    EnvHostField,
    EnvironmentFacts,
    AgentFacts,
    CheckpointRef,
    DeviceKind,
    Job,
    JobSpecFacts,
    JobState,
    JobType,
    LossFacts,
    NumericField,
    Progress,
    ResourceRequest,
)

NUMERIC_TYPES = frozenset({FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT,
                           FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64})
OPAQUE_MESSAGES = frozenset({"google.protobuf.Struct"})  # user config: any numbers allowed


def spec_blob(spec: job_pb2.JobSpec) -> bytes:
    """Deterministic bytes: equal specs give equal blobs (idempotent SubmitJob compares them)."""
    return spec.SerializeToString(deterministic=True)


def facts_from_spec(spec: job_pb2.JobSpec) -> JobSpecFacts:
    scalars = tuple(scalar_fields(spec, "spec"))  # walked once, read three times below
    for path in non_finite_struct_numbers(spec, "spec"):
        raise InvalidArgument(path, "must be a finite number: NaN and Infinity have no JSON form (the "
                              "Coordinator and the games read configs as JSON)")
    training = spec.training
    return JobSpecFacts(
        type=job_type_from_proto(spec.type, field="spec.type"), priority=spec.priority,
        policy=agent_facts(spec.policy, "spec.policy") if spec.HasField("policy") else None,
        agents=tuple(agent_facts(a, f"spec.agents[{i}]") for i, a in enumerate(spec.agents)),
        env_name=spec.environment.env_name, dataset_path=spec.dataset.path,
        path_fields=tuple(spec_paths.path_fields(spec)), checkpoint_refs=tuple(spec_paths.checkpoint_refs(spec)),
        total_steps=training.total_steps, batch_size=training.batch_size,
        group_size=training.group_size, target_loss=training.target_loss,
        max_retries=training.max_retries if training.HasField("max_retries") else None,
        resources=tuple(resource_from_proto(r, f"spec.resources[{i}]") for i, r in enumerate(spec.resources)),
        numbers=tuple(numeric_fields(spec, "spec", scalars)), label_count=len(spec.labels),
        labels=tuple(spec.labels.items()), display_name=spec.display_name,
        unknown_enums=tuple(unknown_enum_values(spec, "spec", scalars)), output_path=spec.inference.output_path,
        multi_agent_set=spec.HasField("multi_agent"), envhost_fields=tuple(envhost_fields(spec, "spec", scalars)),
        environments=tuple(environment_facts(scalars)),
        max_staleness=getattr(spec, "async").max_staleness, sections=spec_sections(spec))


def spec_sections(spec: job_pb2.JobSpec) -> frozenset[str]:
    """The names of the spec's top-level message fields that are set (`environment`, `async`...)."""
    return frozenset(descriptor.name for descriptor, _ in spec.ListFields()
                     if descriptor.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE and not descriptor.is_repeated)


def stored_spec_facts(blob: bytes) -> JobSpecFacts:
    """The facts of a stored job's spec (`Job.spec_blob`, valid when it was submitted)."""
    return facts_from_spec(job_pb2.JobSpec.FromString(blob))


def inference_output_of(job: Job) -> str | None:
    """An INFERENCE job's spec.inference.output_path ("" = the default name); None for other jobs."""
    if job.type is not JobType.INFERENCE:
        return None
    return job_pb2.JobSpec.FromString(job.spec_blob).inference.output_path


ENVIRONMENT_REFERENCE = environment_pb2.EnvironmentReference.DESCRIPTOR.full_name


Scalars = Iterable[tuple[FieldDescriptor, object, str]]
"""What `scalar_fields` yields: (descriptor, value, path) of every set scalar."""


def envhost_fields(message: Message, path: str, scalars: Scalars | None = None) -> Iterator[EnvHostField]:
    """Every envhost_address and envhost set in an EnvironmentReference below `message` (`scalars`:
    its `scalar_fields`, when read already)."""
    for descriptor, value, name in scalar_fields(message, path) if scalars is None else scalars:
        if descriptor.containing_type.full_name == ENVIRONMENT_REFERENCE and descriptor.name in ("envhost_address",
                                                                                               "envhost"):
            yield EnvHostField(path=name, kind=descriptor.name, value=str(value))


def environment_facts(scalars: Scalars) -> Iterator[EnvironmentFacts]:
    """Every EnvironmentReference with a scalar set, with its field path (from the spec's
    `scalar_fields`: no second walk of the spec)."""
    references: dict[str, dict[str, str]] = {}
    for descriptor, value, name in scalars:
        if descriptor.containing_type.full_name == ENVIRONMENT_REFERENCE:
            path, _, field_name = name.rpartition(".")
            references.setdefault(path, {})[field_name] = str(value)
    for path, fields in references.items():
        yield EnvironmentFacts(path=path, env_name=fields.get("env_name", ""), envhost=fields.get("envhost", ""),
                               envhost_address=fields.get("envhost_address", ""))


def agent_facts(agent: job_pb2.AgentSpec, path: str) -> AgentFacts:
    has_model = agent.HasField("model") and agent.model.WhichOneof("source") is not None
    return AgentFacts(path=path, agent_id=agent.agent_id, has_model=has_model, frozen=agent.frozen,
                      builtin_model=agent.model.builtin.name, checkpoint_id=agent.model.checkpoint.checkpoint_id,
                      has_adaptation=agent.adaptation.WhichOneof("kind") is not None,
                      learning_rate=agent.algorithm.optimizer.learning_rate,
                      loss=loss_facts(agent.algorithm.loss))


def loss_facts(loss: algorithm_pb2.LossConfig) -> LossFacts:
    return LossFacts(function=_name_or(algorithm_pb2.LossFunction, loss.function, "LOSS_FUNCTION_", ""),
                     importance_mask=_name_or(algorithm_pb2.ImportanceMask, loss.importance_mask,
                                              "IMPORTANCE_MASK_", ""),
                     importance_mask_low=loss.importance_mask_low,
                     importance_mask_high=loss.importance_mask_high)


def resource_from_proto(request: resources_pb2.ResourceRequest, path: str) -> ResourceRequest:
    kind = enum_from_proto(DeviceKind, resources_pb2.DeviceKind, "DEVICE_KIND_", request.device_kind,
                           field=f"{path}.device_kind")
    return ResourceRequest(role=role_from_proto(request.role, field=f"{path}.role"),
                           device_count=request.device_count, device_kind=kind,
                           min_memory_bytes=request.min_memory_bytes)


def scalar_fields(message: Message, path: str) -> Iterator[tuple[FieldDescriptor, object, str]]:
    """(descriptor, value, path) of every set scalar below `message` (maps and Structs skipped)."""
    for descriptor, value in message.ListFields():
        name = f"{path}.{descriptor.name}"
        values = value if descriptor.is_repeated else [value]
        for index, item in enumerate(values):
            item_path = f"{name}[{index}]" if descriptor.is_repeated else name
            if descriptor.cpp_type != FieldDescriptor.CPPTYPE_MESSAGE:
                yield descriptor, item, item_path
            elif not _skipped(descriptor.message_type):
                yield from scalar_fields(item, item_path)  # type: ignore[arg-type]


@functools.cache
def _skipped(message_type: Descriptor) -> bool:
    """Map entries and opaque user configs: no scalar of theirs is looked at (cached per type)."""
    return _map_entry(message_type) or message_type.full_name in OPAQUE_MESSAGES


@functools.cache
def _map_entry(message_type: Descriptor) -> bool:
    return message_type.GetOptions().map_entry


def non_finite_struct_numbers(message: Message, path: str) -> Iterator[str]:
    """Paths of NaN and +-Infinity numbers inside the Structs (user configs) below `message`, keys
    in brackets as spec.labels' are: spec.environment.config['levels'][0]['penalty']."""
    if message.DESCRIPTOR.full_name in OPAQUE_MESSAGES:
        for key, value in message.fields.items():  # type: ignore[attr-defined]
            yield from _non_finite_values(value, f"{path}[{key!r}]")
        return
    for descriptor, value in message.ListFields():
        if descriptor.cpp_type != FieldDescriptor.CPPTYPE_MESSAGE or _map_entry(descriptor.message_type):
            continue
        items = value if descriptor.is_repeated else [value]
        for index, item in enumerate(items):
            name = f"{path}.{descriptor.name}" + (f"[{index}]" if descriptor.is_repeated else "")
            yield from non_finite_struct_numbers(item, name)  # type: ignore[arg-type]


def _non_finite_values(value: struct_pb2.Value, path: str) -> Iterator[str]:
    kind = value.WhichOneof("kind")
    if kind == "number_value" and not math.isfinite(value.number_value):
        yield path
    elif kind == "struct_value":
        yield from non_finite_struct_numbers(value.struct_value, path)
    elif kind == "list_value":
        for index, item in enumerate(value.list_value.values):
            yield from _non_finite_values(item, f"{path}[{index}]")


def numeric_fields(message: Message, path: str, scalars: Scalars | None = None) -> Iterator[NumericField]:
    """Every set numeric field below `message`, with its path."""
    for descriptor, value, name in scalar_fields(message, path) if scalars is None else scalars:
        if descriptor.cpp_type in NUMERIC_TYPES:
            yield NumericField(path=name, value=float(value))  # type: ignore[arg-type]


def unknown_enum_values(message: Message, path: str, scalars: Scalars | None = None) -> Iterator[str]:
    """'<path>: <n> is not a known <Enum> value' for enum numbers newer than our protos."""
    for descriptor, value, name in scalar_fields(message, path) if scalars is None else scalars:
        if descriptor.cpp_type == FieldDescriptor.CPPTYPE_ENUM and value not in descriptor.enum_type.values_by_number:
            yield f"{name}: {value} is not a known {descriptor.enum_type.name} value"


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
