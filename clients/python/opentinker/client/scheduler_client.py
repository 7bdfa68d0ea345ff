"""SchedulerClient: jobs, workers, tenants and keys over gRPC (blocking API; see AsyncSchedulerClient).

    with SchedulerClient("127.0.0.1:50051") as scheduler:
        job = scheduler.submit_job({"type": "RL", ...})
        for event in scheduler.watch_job(job.job_id):
            print(event)

Idempotent calls are retried on UNAVAILABLE with backoff (client/retry.py): reads, SubmitJob
(its request_id makes a retry return the same job), CancelJob, quota updates, key revocation.
Creating a tenant or an API key is not retried. WatchJob resumes after the last event it
delivered, so a dropped stream loses nothing and repeats nothing.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc

from opentinker_api.common.v1 import model_pb2
from opentinker_api.scheduler.v1 import job_pb2, tenant_pb2, worker_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker.client import scheduler_requests as requests
from opentinker.client.artifacts import save_stream
from opentinker.client.credentials import resolve_api_key
from opentinker.client.errors import from_rpc_error
from opentinker.client.retry import RetryPolicy, call_with_retry
from opentinker.client.scheduler_requests import TERMINAL_STATES, normalize_address, state_name
from opentinker.client.tls import ClientTls, open_channel

__all__ = ["InferenceSchedulerClient", "SchedulerClient", "TERMINAL_STATES", "normalize_address", "state_name"]

CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0),)


class SchedulerClient:
    def __init__(self, url: str = "127.0.0.1:50051", *, api_key: str | None = None, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, tls: ClientTls | None = None) -> None:
        """`tls`: the stack's CA (and a client certificate for mutual TLS); None = the
        environment's (OPENTINKER_TLS_CA_FILE ...), else plaintext (`opentinker.client.tls`)."""
        self.address = normalize_address(url)
        self.channel = open_channel(self.address, CHANNEL_OPTIONS, tls)
        self.stub = pb_grpc.SchedulerServiceStub(self.channel)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.metadata = requests.bearer_metadata(resolve_api_key(api_key))

    def __enter__(self) -> SchedulerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _call(self, method: Callable, request, *, idempotent: bool = True):  # noqa: ANN001, ANN202
        return call_with_retry(lambda: method(request, timeout=self.timeout, metadata=self.metadata),
                               self.retry, idempotent=idempotent)

    def _pages(self, method: Callable, make_request: Callable[[str], object], field: str) -> Iterator:
        token = ""
        while True:
            response = self._call(method, make_request(token))
            yield from getattr(response, field)
            token = response.next_page_token
            if not token:
                return

    # Jobs

    def submit_job(self, spec: job_pb2.JobSpec | dict, *, request_id: str | None = None) -> job_pb2.Job:
        """Queue a job; safe to retry with the same request_id (the same job comes back)."""
        return self._call(self.stub.SubmitJob, requests.submit_request(spec, request_id)).job

    def validate_job(self, spec: job_pb2.JobSpec | dict) -> None:
        """Ask the Scheduler whether it would accept `spec` (SubmitJob with validate_only: nothing
        is stored); raises what SubmitJob would (InvalidArgument naming the field, ...)."""
        request = requests.submit_request(spec, None)
        request.validate_only = True
        self._call(self.stub.SubmitJob, request)

    def get_job(self, job_id: str) -> job_pb2.Job:
        return self._call(self.stub.GetJob, pb.GetJobRequest(job_id=job_id)).job

    def list_jobs(self, *, states: list[int] | None = None, page_size: int = 50) -> Iterator[job_pb2.Job]:
        """Every job the caller may see, newest first, across pages."""
        return self._pages(self.stub.ListJobs, lambda token: pb.ListJobsRequest(
            page_size=page_size, page_token=token, states=states or []), "jobs")

    def cancel_job(self, job_id: str, *, reason: str = "", request_id: str | None = None) -> job_pb2.Job:
        return self._call(self.stub.CancelJob, requests.cancel_request(job_id, reason, request_id)).job

    def watch_job(self, job_id: str, *, after_sequence: int = 0) -> Iterator[job_pb2.JobEvent]:
        """Events in order until the job ends; reconnects after a dropped stream without gaps."""
        last, retry = after_sequence, 0
        while True:
            try:
                request = pb.WatchJobRequest(job_id=job_id, after_sequence=last)
                for response in self.stub.WatchJob(request, metadata=self.metadata):
                    last, retry = response.event.sequence, 0
                    yield response.event
                return
            except grpc.RpcError as error:
                if not self.retry.should_retry(error, retry):
                    raise from_rpc_error(error) from None
                time.sleep(self.retry.delay(retry))
                retry += 1

    def read_events(self, job_id: str, *, after_sequence: int = 0) -> list[job_pb2.JobEvent]:
        """The job's events so far (up to its last_event_sequence now), without waiting for more."""
        last = self.get_job(job_id).last_event_sequence
        if last <= after_sequence:
            return []
        events = []
        call = self.stub.WatchJob(pb.WatchJobRequest(job_id=job_id, after_sequence=after_sequence),
                                  metadata=self.metadata, timeout=self.timeout)
        try:
            for response in call:
                events.append(response.event)
                if response.event.sequence >= last:
                    break
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        finally:
            call.cancel()
        return events

    def wait(self, job_id: str, on_event: Callable[[job_pb2.JobEvent], None] | None = None) -> job_pb2.Job:
        """Block until the job ends, calling on_event for each event; the final job."""
        for event in self.watch_job(job_id):
            if on_event:
                on_event(event)
        return requests.ended(self.get_job(job_id))

    # Results: samples and artifacts

    def list_samples(self, job_id: str, *, step: int | None = None, split: str = "",
                     limit: int = 20) -> list[job_pb2.SamplesReported]:
        """The episodes the job showed as samples, newest step first (at most `limit` reports,
        each a step's few episodes of one split), optionally of one step or split."""
        def request(token: str) -> pb.ListJobSamplesRequest:
            message = pb.ListJobSamplesRequest(job_id=job_id, split=split, page_size=min(limit, 200),
                                               page_token=token)
            if step is not None:
                message.step = step
            return message
        return list(itertools.islice(self._pages(self.stub.ListJobSamples, request, "samples"), limit))

    def list_artifacts(self, job_id: str) -> list[pb.Artifact]:
        """The job's checkpoints (by step) and outputs, with sizes and SHA-256 sums."""
        return list(self._pages(self.stub.ListArtifacts, lambda token: pb.ListArtifactsRequest(
            job_id=job_id, page_token=token), "artifacts"))

    def download_artifact(self, artifact_id: str, destination: str | Path, *, path_prefix: str = "") -> list[Path]:
        """Write the artifact's files (those under `path_prefix`, placed without it) into
        `destination`, each checked against its SHA-256; the paths written."""
        request = pb.DownloadArtifactRequest(artifact_id=artifact_id, path_prefix=path_prefix)
        call = self.stub.DownloadArtifact(request, metadata=self.metadata)
        try:
            return save_stream(call, Path(destination), path_prefix)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        finally:
            call.cancel()

    # Workers

    def list_workers(self, *, role: int = 0, page_size: int = 100) -> Iterator[worker_pb2.Worker]:
        """Registered workers with their devices and leases."""
        return self._pages(self.stub.ListWorkers, lambda token: pb.ListWorkersRequest(
            page_size=page_size, page_token=token, role=role), "workers")

    # Tenants and keys (admin keys, except listing one's own keys)

    def create_tenant(self, tenant_id: str, *, display_name: str = "", **quota: int) -> pb.CreateTenantResponse:
        """A tenant and its first key (the secret is in the response only). Not retried."""
        request = pb.CreateTenantRequest(tenant_id=tenant_id, display_name=display_name,
                                         quota=requests.quota(**quota))
        return self._call(self.stub.CreateTenant, request, idempotent=False)

    def get_tenant(self, tenant_id: str) -> tenant_pb2.Tenant:
        return self._call(self.stub.GetTenant, pb.GetTenantRequest(tenant_id=tenant_id)).tenant

    def list_tenants(self, *, page_size: int = 100) -> Iterator[tenant_pb2.Tenant]:
        return self._pages(self.stub.ListTenants, lambda token: pb.ListTenantsRequest(
            page_size=page_size, page_token=token), "tenants")

    def update_quota(self, tenant_id: str, **quota: int) -> tenant_pb2.Tenant:
        request = pb.UpdateTenantQuotaRequest(tenant_id=tenant_id, quota=requests.quota(**quota))
        return self._call(self.stub.UpdateTenantQuota, request).tenant

    def create_api_key(self, tenant_id: str, *, admin: bool = False, description: str = "") -> pb.CreateApiKeyResponse:
        """A new key (the secret is in the response only). Not retried."""
        request = pb.CreateApiKeyRequest(tenant_id=tenant_id, admin=admin, description=description)
        return self._call(self.stub.CreateApiKey, request, idempotent=False)

    def list_api_keys(self, tenant_id: str, *, page_size: int = 100) -> Iterator[tenant_pb2.ApiKey]:
        return self._pages(self.stub.ListApiKeys, lambda token: pb.ListApiKeysRequest(
            tenant_id=tenant_id, page_size=page_size, page_token=token), "api_keys")

    def revoke_api_key(self, key_id: str) -> tenant_pb2.ApiKey:
        return self._call(self.stub.RevokeApiKey, pb.RevokeApiKeyRequest(key_id=key_id)).api_key


class InferenceSchedulerClient(SchedulerClient):
    """Inference jobs: run an environment's episodes with a fixed model, write JSONL."""

    def submit_inference_job(self, *, model: model_pb2.ModelReference | dict, env_name: str,
                             num_episodes: int = 32, output_path: str = "", env_config: dict | None = None,
                             envhost_address: str = "", max_new_tokens: int = 32,
                             request_id: str | None = None) -> job_pb2.Job:
        spec = requests.inference_spec(model=model, env_name=env_name, num_episodes=num_episodes,
                                       output_path=output_path, env_config=env_config,
                                       envhost_address=envhost_address, max_new_tokens=max_new_tokens)
        return self.submit_job(spec, request_id=request_id)
