"""The parts of the tenant-isolation table (test_tenant_isolation.py) other modules use: the
Scheduler's rows (what tenant B's key gets for each RPC aimed at tenant A's objects), calling
any RPC by its path, and the bearer metadata of a key."""

from __future__ import annotations

import enum
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory

import opentinker_api
from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2, tenant_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.client.spec import job_spec_from_dict
from harness.job_specs import rl_spec

A_TENANT, B_TENANT, A_DISPLAY_NAME = "iso-alpha", "iso-beta", "alpha-private-run-5c1e"


class Expect(enum.Enum):
    OWN = "succeeds, showing only B's own objects"
    NOT_FOUND = grpc.StatusCode.NOT_FOUND
    DENIED = grpc.StatusCode.PERMISSION_DENIED


@dataclass(frozen=True)
class World:
    """A's objects (as an admin sees them) and both tenants' keys."""

    a_key: str
    a_key_id: str
    b_key: str
    a_job: job_pb2.Job
    a_request_id: str

    def a_lease(self, role: int = resources_pb2.ROLE_COORDINATOR) -> resources_pb2.LeaseContext:
        return next(a.lease for a in self.a_job.assignments if a.role == role)

    def a_worker(self, role: int) -> str:
        return next(a.worker_id for a in self.a_job.assignments if a.role == role)

    def a_secrets(self) -> list[str]:
        """Everything of A's that must not show in what B reads."""
        leases = [a.lease.lease_id for a in self.a_job.assignments]
        tokens = [a.job_token for a in self.a_job.assignments if a.job_token]
        return [self.a_job.job_id, A_TENANT, A_DISPLAY_NAME, self.a_key_id, self.a_key, *leases, *tokens]


Request = Callable[[World], Any]
SCHEDULER_ROWS: dict[str, tuple[Expect, Request]] = {
    "SubmitJob": (Expect.OWN, lambda w: pb.SubmitJobRequest(request_id=w.a_request_id,
                                                             spec=job_spec_from_dict(named_spec("beta-run")))),
    "GetJob": (Expect.NOT_FOUND, lambda w: pb.GetJobRequest(job_id=w.a_job.job_id)),
    "ListJobs": (Expect.OWN, lambda w: pb.ListJobsRequest(page_size=100)),
    "CancelJob": (Expect.NOT_FOUND, lambda w: pb.CancelJobRequest(job_id=w.a_job.job_id)),
    "WatchJob": (Expect.NOT_FOUND, lambda w: pb.WatchJobRequest(job_id=w.a_job.job_id)),
    "ListJobSamples": (Expect.NOT_FOUND, lambda w: pb.ListJobSamplesRequest(job_id=w.a_job.job_id)),
    "ListArtifacts": (Expect.NOT_FOUND, lambda w: pb.ListArtifactsRequest(job_id=w.a_job.job_id)),
    "DownloadArtifact": (Expect.NOT_FOUND, lambda w: pb.DownloadArtifactRequest(artifact_id=f"{w.a_job.job_id}-final")),
    "RegisterWorker": (Expect.DENIED, lambda w: pb.RegisterWorkerRequest(
        worker_id=w.a_worker(resources_pb2.ROLE_TRAINER), role=resources_pb2.ROLE_TRAINER, address="127.0.0.1:1")),
    "Heartbeat": (Expect.NOT_FOUND, lambda w: pb.HeartbeatRequest(
        worker_id=w.a_worker(resources_pb2.ROLE_COORDINATOR))),
    "DeregisterWorker": (Expect.NOT_FOUND, lambda w: pb.DeregisterWorkerRequest(
        worker_id=w.a_worker(resources_pb2.ROLE_TRAINER))),
    "ListWorkers": (Expect.OWN, lambda w: pb.ListWorkersRequest()),
    "CheckJobToken": (Expect.NOT_FOUND, lambda w: pb.CheckJobTokenRequest(job_id=w.a_job.job_id,
                                                                           job_token=w.a_secrets()[-1])),
    "ReportJobEvents": (Expect.DENIED, lambda w: pb.ReportJobEventsRequest(lease=w.a_lease())),
    "FinishJob": (Expect.DENIED, lambda w: pb.FinishJobRequest(lease=w.a_lease(),
                                                                final_state=job_pb2.Job.STATE_FAILED)),
    "CreateTenant": (Expect.DENIED, lambda w: pb.CreateTenantRequest(tenant_id=A_TENANT)),
    "GetTenant": (Expect.NOT_FOUND, lambda w: pb.GetTenantRequest(tenant_id=A_TENANT)),
    "ListTenants": (Expect.DENIED, lambda w: pb.ListTenantsRequest()),
    "UpdateTenantQuota": (Expect.DENIED, lambda w: pb.UpdateTenantQuotaRequest(tenant_id=A_TENANT,
                                                                                quota=tenant_pb2.Quota(max_devices=1))),
    "CreateApiKey": (Expect.DENIED, lambda w: pb.CreateApiKeyRequest(tenant_id=A_TENANT)),
    "ListApiKeys": (Expect.NOT_FOUND, lambda w: pb.ListApiKeysRequest(tenant_id=A_TENANT)),
    "RevokeApiKey": (Expect.DENIED, lambda w: pb.RevokeApiKeyRequest(key_id=w.a_key_id)),
}


def named_spec(display_name: str) -> dict:
    return rl_spec(2, name=display_name)


def method_descriptor(path: str):  # noqa: ANN201
    for info in pkgutil.walk_packages(opentinker_api.__path__, "opentinker_api."):
        if info.name.endswith("_pb2"):
            for service in importlib.import_module(info.name).DESCRIPTOR.services_by_name.values():
                if path.startswith(service.full_name + "/"):
                    return service.methods_by_name[path.split("/", 1)[1]]
    raise KeyError(path)


def call(channel: grpc.Channel, path: str, request: Any, metadata: list[tuple[str, str]]) -> Any:
    """Call any RPC by its path (streams sent as one message, received as a list)."""
    method = method_descriptor(path)
    response_type = message_factory.GetMessageClass(method.output_type)
    kind = {(False, False): channel.unary_unary, (False, True): channel.unary_stream,
            (True, False): channel.stream_unary, (True, True): channel.stream_stream}[
        (method.client_streaming, method.server_streaming)]
    stub = kind(f"/{path}", request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response_type.FromString)
    response = stub(iter([request]) if method.client_streaming else request, metadata=metadata, timeout=30)
    return list(response) if method.server_streaming else response


def bearer(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]
