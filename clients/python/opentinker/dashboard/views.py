"""Scheduler messages as the JSON the page reads: plain numbers, enum names without prefixes,
ISO-8601 times ("" when unset). Pure functions; nothing here calls anything."""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from opentinker_api.common.v1 import progress_pb2, resources_pb2, trajectory_pb2
from opentinker_api.scheduler.v1 import job_pb2, tenant_pb2, worker_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb

Json = dict[str, Any]


def enum_name(enum_type, value: int, prefix: str) -> str:  # noqa: ANN001 - a protobuf enum wrapper
    return enum_type.Name(value).removeprefix(prefix) if value in enum_type.values() else str(value)


def iso_time(timestamp: Timestamp) -> str:
    if not timestamp.seconds and not timestamp.nanos:
        return ""
    return timestamp.ToDatetime().isoformat(timespec="milliseconds") + "Z"


def finite(value: float) -> float | None:
    """JSON has no NaN or Infinity: a metric that is not a finite number becomes null."""
    return value if math.isfinite(value) else None


def finite_values(values) -> dict[str, float | None]:  # noqa: ANN001 - a protobuf map<string, double>
    return {name: finite(value) for name, value in sorted(values.items())}


def job_state(value: int) -> str:
    return enum_name(job_pb2.Job.State, value, "STATE_")


def role_name(value: int) -> str:
    return enum_name(resources_pb2.Role, value, "ROLE_")


def progress_view(progress: progress_pb2.JobProgress, *, planned_steps: int = 0) -> Json:
    """`planned_steps` (the spec's total_steps) stands in until the job reports its own total."""
    return {
        "phase": enum_name(progress_pb2.Phase, progress.phase, "PHASE_"),
        "step": progress.step, "total_steps": progress.total_steps or planned_steps,
        "phase_done": progress.phase_done, "phase_total": progress.phase_total,
        "last_checkpoint_id": progress.last_checkpoint_id,
        "update_time": iso_time(progress.update_time),
        "latest_metrics": finite_values(progress.latest_metrics),
    }


def job_view(job: job_pb2.Job) -> Json:
    return {
        "job_id": job.job_id, "tenant_id": job.tenant_id, "display_name": job.spec.display_name,
        "type": enum_name(job_pb2.JobType, job.spec.type, "JOB_TYPE_"), "state": job_state(job.state),
        "create_time": iso_time(job.create_time), "update_time": iso_time(job.update_time),
        "start_time": iso_time(job.start_time), "end_time": iso_time(job.end_time),
        "progress": progress_view(job.progress, planned_steps=job.spec.training.total_steps),
        "status_message": job.status_message,
        "queue_position": job.queue_position, "attempt": job.attempt,
        "cancel_requested": job.cancel_requested, "last_event_sequence": job.last_event_sequence,
        "assignments": [assignment_view(a) for a in job.assignments],
        "spec": json_format.MessageToDict(job.spec, preserving_proto_field_name=True),
    }


def assignment_view(assignment: job_pb2.Assignment) -> Json:
    return {"role": role_name(assignment.role), "worker_id": assignment.worker_id,
            "address": assignment.address, "device_ids": list(assignment.device_ids)}


def event_view(event: job_pb2.JobEvent) -> Json:
    """One JobEvent: {sequence, time, kind, <kind>: {...}} with kind the payload's field name."""
    kind = event.WhichOneof("payload") or "unknown"
    return {"sequence": event.sequence, "time": iso_time(event.time), "kind": kind,
            kind: payload_view(event, kind)}


def payload_view(event: job_pb2.JobEvent, kind: str) -> Json:
    if kind == "state_changed":
        change = event.state_changed
        return {"from_state": job_state(change.from_state), "to_state": job_state(change.to_state),
                "reason": change.reason}
    if kind == "metrics":
        return {"step": event.metrics.step, "agent_id": event.metrics.agent_id,
                "values": finite_values(event.metrics.values)}
    if kind == "progress":
        return progress_view(event.progress.progress)
    if kind == "log":
        return {"level": enum_name(job_pb2.LogLine.Level, event.log.level, "LEVEL_"),
                "source": event.log.source, "message": event.log.message}
    if kind == "checkpoint":
        return {"checkpoint_id": event.checkpoint.checkpoint_id, "step": event.checkpoint.step}
    if kind == "samples":
        return samples_view(event.samples)
    if kind == "worker_lost":
        lost = event.worker_lost
        return {"worker_id": lost.worker_id, "role": role_name(lost.role), "reason": lost.reason}
    return {}


def worker_view(worker: worker_pb2.Worker) -> Json:
    return {
        "worker_id": worker.worker_id, "role": role_name(worker.role), "address": worker.address,
        "state": enum_name(worker_pb2.Worker.State, worker.state, "STATE_"),
        "register_time": iso_time(worker.register_time),
        "last_heartbeat_time": iso_time(worker.last_heartbeat_time),
        "devices": [device_view(d) for d in worker.devices],
        "leases": [lease_view(lease) for lease in worker.leases],
        "labels": dict(worker.labels), "version": worker.version,
        "resident_models": [{"device_id": m.device_id, "model_key": m.model_key, "job_ids": list(m.job_ids)}
                            for m in worker.resident_models],
    }


def device_view(device: resources_pb2.Device) -> Json:
    return {"device_id": device.device_id, "name": device.name, "memory_bytes": device.memory_bytes,
            "kind": enum_name(resources_pb2.DeviceKind, device.kind, "DEVICE_KIND_")}


def lease_view(lease: worker_pb2.Lease) -> Json:
    return {"lease_id": lease.lease_id, "job_id": lease.job_id, "device_ids": list(lease.device_ids),
            "fencing_token": lease.fencing_token, "expire_time": iso_time(lease.expire_time)}


def tenant_view(tenant: tenant_pb2.Tenant) -> Json:
    """Usage against quota; a quota of 0 means unlimited."""
    return {
        "tenant_id": tenant.tenant_id, "display_name": tenant.display_name,
        "create_time": iso_time(tenant.create_time),
        "quota": {"max_devices": tenant.quota.max_devices,
                  "max_concurrent_jobs": tenant.quota.max_concurrent_jobs,
                  "max_queued_jobs": tenant.quota.max_queued_jobs},
        "usage": {"devices": tenant.usage.devices, "running_jobs": tenant.usage.running_jobs,
                  "queued_jobs": tenant.usage.queued_jobs},
    }


def samples_view(report: job_pb2.SamplesReported) -> Json:
    return {"step": report.step, "split": report.split, "agent_id": report.agent_id,
            "samples": [sample_view(sample) for sample in report.samples]}


def sample_view(sample: job_pb2.EpisodeSample) -> Json:
    return {"group_id": sample.group_id, "prompt": sample.prompt, "reward": finite(sample.reward),
            "stop_reason": enum_name(trajectory_pb2.StopReason, sample.stop_reason, "STOP_REASON_"),
            "correct": sample.correct if sample.HasField("correct") else None,
            "turns": [{"action": t.action, "observation": t.observation, "reward": finite(t.reward),
                       "truncated": t.truncated} for t in sample.turns]}


def artifact_view(artifact: pb.Artifact) -> Json:
    return {"artifact_id": artifact.artifact_id, "kind": enum_name(pb.Artifact.Kind, artifact.kind, "KIND_"),
            "format": artifact.format, "step": artifact.step, "size_bytes": artifact.size_bytes,
            "files": len(artifact.files), "loadable_dirs": list(artifact.loadable_dirs)}
