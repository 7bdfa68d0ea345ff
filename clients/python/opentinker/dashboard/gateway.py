"""The dashboard's one gRPC client of the Scheduler: every call carries the caller's API key.

One channel serves every HTTP request thread (a grpc channel is thread-safe); the key travels
per call as `authorization: Bearer <key>` metadata, so requests with different keys share it.
This is the only dashboard module that imports grpc; failures leave it as `ApiError`.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from opentinker.client.tls import open_channel
from opentinker_api.scheduler.v1 import job_pb2, tenant_pb2, worker_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker.client.scheduler_client import normalize_address
from opentinker.dashboard.errors import ApiError

LIST_PAGE_SIZE = 100
HISTORY_TIMEOUT_SECONDS = 60.0


def api_error(error: grpc.RpcError) -> ApiError:
    code = error.code().name if error.code() else "UNKNOWN"
    return ApiError(code, error.details() or code)


class EventStream:
    """A live WatchJob call: iterate its JobEvents; `cancel()` (from any thread) ends it."""

    def __init__(self, call) -> None:  # noqa: ANN001 - grpc's streaming call object
        self._call = call
        self.cancelled = False

    def __iter__(self) -> Iterator[job_pb2.JobEvent]:
        try:
            for response in self._call:
                yield response.event
        except grpc.RpcError as error:
            if self.cancelled and error.code() == grpc.StatusCode.CANCELLED:
                return
            raise api_error(error) from None

    def cancel(self) -> None:
        self.cancelled = True
        self._call.cancel()


class SchedulerGateway:
    def __init__(self, address: str, *, timeout: float = 10.0) -> None:
        self.address = normalize_address(address)
        self.channel = open_channel(self.address, [("grpc.enable_http_proxy", 0)])  # TLS: the environment's CA
        self.stub = pb_grpc.SchedulerServiceStub(self.channel)
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def _unary(self, method, request, api_key: str):  # noqa: ANN001, ANN202 - a stub method and its message
        try:
            return method(request, timeout=self.timeout, metadata=_metadata(api_key))
        except grpc.RpcError as error:
            raise api_error(error) from None

    def list_jobs(self, api_key: str, *, page_size: int, page_token: str) -> pb.ListJobsResponse:
        request = pb.ListJobsRequest(page_size=page_size, page_token=page_token)
        return self._unary(self.stub.ListJobs, request, api_key)

    def get_job(self, api_key: str, job_id: str) -> job_pb2.Job:
        return self._unary(self.stub.GetJob, pb.GetJobRequest(job_id=job_id), api_key).job

    def cancel_job(self, api_key: str, job_id: str, *, request_id: str, reason: str) -> job_pb2.Job:
        request = pb.CancelJobRequest(job_id=job_id, request_id=request_id, reason=reason)
        return self._unary(self.stub.CancelJob, request, api_key).job

    def list_samples(self, api_key: str, job_id: str, *, split: str, page_size: int) -> list[job_pb2.SamplesReported]:
        """The newest `page_size` (at most 200) sample reports of the job."""
        request = pb.ListJobSamplesRequest(job_id=job_id, split=split, page_size=page_size)
        return list(self._unary(self.stub.ListJobSamples, request, api_key).samples)

    def list_artifacts(self, api_key: str, job_id: str) -> list[pb.Artifact]:
        items, token = [], ""
        while True:
            response = self._unary(self.stub.ListArtifacts, pb.ListArtifactsRequest(
                job_id=job_id, page_size=LIST_PAGE_SIZE, page_token=token), api_key)
            items.extend(response.artifacts)
            token = response.next_page_token
            if not token:
                return items

    def download(self, api_key: str, artifact_id: str, path_prefix: str) -> Iterator[pb.DownloadArtifactResponse]:
        """The artifact's file stream (errors after the first message surface as ApiError too)."""
        call = self.stub.DownloadArtifact(pb.DownloadArtifactRequest(artifact_id=artifact_id, path_prefix=path_prefix),
                                          metadata=_metadata(api_key))
        try:
            yield from call
        except grpc.RpcError as error:
            raise api_error(error) from None
        finally:
            call.cancel()

    def list_workers(self, api_key: str) -> list[worker_pb2.Worker]:
        return self._all_pages(self.stub.ListWorkers, pb.ListWorkersRequest, "workers", api_key)

    def list_tenants(self, api_key: str) -> list[tenant_pb2.Tenant]:
        return self._all_pages(self.stub.ListTenants, pb.ListTenantsRequest, "tenants", api_key)

    def _all_pages(self, method, request_type, field: str, api_key: str) -> list:  # noqa: ANN001
        items, token = [], ""
        while True:
            response = self._unary(method, request_type(page_size=LIST_PAGE_SIZE, page_token=token), api_key)
            items.extend(getattr(response, field))
            token = response.next_page_token
            if not token:
                return items

    def watch(self, api_key: str, job_id: str, *, after_sequence: int,
              timeout: float | None = None) -> EventStream:
        """Events after `after_sequence`, then live ones until the job ends (the stream closes)."""
        request = pb.WatchJobRequest(job_id=job_id, after_sequence=after_sequence)
        return EventStream(self.stub.WatchJob(request, timeout=timeout, metadata=_metadata(api_key)))

    def events_until(self, api_key: str, job_id: str, last_sequence: int) -> list[job_pb2.JobEvent]:
        """The job's stored events 1..last_sequence (what happened up to now)."""
        if last_sequence <= 0:
            return []
        stream = self.watch(api_key, job_id, after_sequence=0, timeout=HISTORY_TIMEOUT_SECONDS)
        events = []
        try:
            for event in stream:
                events.append(event)
                if event.sequence >= last_sequence:
                    break
        finally:
            stream.cancel()
        return events


def _metadata(api_key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {api_key}"),) if api_key else ()
