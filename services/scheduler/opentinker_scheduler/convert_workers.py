"""Protobuf <-> domain for workers, devices, leases and assignments."""

from __future__ import annotations

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2, scheduler_service_pb2 as service_pb2, worker_pb2
from opentinker_runtime.edge import convert as edge_convert
from opentinker_scheduler.convert_common import duration, enum_from_proto, enum_to_proto, timestamp
from opentinker_scheduler.errors import InvalidArgument
from opentinker_scheduler.model import (
    Assignment,
    Device,
    DeviceKind,
    Lease,
    ResidentModel,
    Role,
    Worker,
    WorkerRegistration,
)


def role_from_proto(value: int, *, field: str) -> Role:
    return enum_from_proto(Role, resources_pb2.Role, "ROLE_", value, field=field)


def role_to_proto(role: Role) -> int:
    return enum_to_proto(resources_pb2.Role, "ROLE_", role)


def registration_from_proto(request: service_pb2.RegisterWorkerRequest) -> WorkerRegistration:
    devices = tuple(device_from_proto(d, field=f"devices[{i}].kind") for i, d in enumerate(request.devices))
    return WorkerRegistration(worker_id=request.worker_id, role=role_from_proto(request.role, field="role"),
                              address=request.address, devices=devices, labels=dict(request.labels),
                              version=request.version, name=request.name)


def device_from_proto(device: resources_pb2.Device, *, field: str) -> Device:
    kind = enum_from_proto(DeviceKind, resources_pb2.DeviceKind, "DEVICE_KIND_", device.kind, field=field)
    if device.shares < 0:
        raise InvalidArgument(f"{field}.shares", f"must be >= 0 (0 or 1: the device is leased whole), got {device.shares}")
    return Device(device_id=device.device_id, kind=kind, memory_bytes=device.memory_bytes, name=device.name,
                  shares=device.shares)


def device_to_proto(device: Device) -> resources_pb2.Device:
    return resources_pb2.Device(device_id=device.device_id, memory_bytes=device.memory_bytes,
                                kind=enum_to_proto(resources_pb2.DeviceKind, "DEVICE_KIND_", device.kind),
                                name=device.name, shares=device.shares)


def lease_to_proto(lease: Lease) -> worker_pb2.Lease:
    return worker_pb2.Lease(lease_id=lease.lease_id, job_id=lease.job_id, worker_id=lease.worker_id,
                            device_ids=list(lease.device_ids), fencing_token=lease.fencing_token,
                            expire_time=timestamp(lease.expire_time_ms))


def worker_to_proto(worker: Worker) -> worker_pb2.Worker:
    return worker_pb2.Worker(
        worker_id=worker.worker_id, role=role_to_proto(worker.role), address=worker.address,
        devices=[device_to_proto(d) for d in worker.devices],
        state=enum_to_proto(worker_pb2.Worker.State, "STATE_", worker.state),
        register_time=timestamp(worker.register_time_ms),
        last_heartbeat_time=timestamp(worker.last_heartbeat_time_ms),
        heartbeat_ttl=duration(worker.heartbeat_ttl_ms),
        leases=[lease_to_proto(lease) for lease in worker.leases], labels=worker.labels,
        version=worker.version, name=worker.name, tenant_id=worker.tenant_id,
        resident_models=[resident_to_proto(m) for m in worker.resident_models])


def resident_to_proto(model: ResidentModel) -> worker_pb2.ResidentModel:
    return worker_pb2.ResidentModel(device_id=model.device_id, model_key=model.model_key, job_ids=list(model.job_ids))


def resident_from_proto(models) -> tuple[ResidentModel, ...]:  # noqa: ANN001 - a repeated ResidentModel field
    return tuple(ResidentModel(device_id=m.device_id, model_key=m.model_key, job_ids=tuple(m.job_ids)) for m in models)


def assignment_to_proto(assignment: Assignment, *, job_token: str = "") -> job_pb2.Assignment:
    return job_pb2.Assignment(
        role=role_to_proto(assignment.role), worker_id=assignment.worker_id, address=assignment.address,
        device_ids=list(assignment.device_ids), job_token=job_token,
        lease=edge_convert.lease_to_proto(assignment.lease))
