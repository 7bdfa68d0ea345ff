"""protobuf <-> the edge's domain types."""

from __future__ import annotations

from opentinker_api.common.v1 import resources_pb2
from opentinker_runtime.edge.lease import LeaseContext


def lease_from_proto(message: resources_pb2.LeaseContext) -> LeaseContext:
    return LeaseContext(job_id=message.job_id, lease_id=message.lease_id, fencing_token=message.fencing_token)


def lease_to_proto(lease: LeaseContext) -> resources_pb2.LeaseContext:
    return resources_pb2.LeaseContext(job_id=lease.job_id, lease_id=lease.lease_id,
                                      fencing_token=lease.fencing_token)
