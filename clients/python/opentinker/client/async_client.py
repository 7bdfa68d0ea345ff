"""asyncio variants of SchedulerClient and ServiceClient (grpc.aio), for notebooks and services.

    async with AsyncSchedulerClient("127.0.0.1:50051") as scheduler:
        job = await scheduler.submit_job(spec)
        async for event in scheduler.watch_job(job.job_id):
            ...

    async with AsyncServiceClient("127.0.0.1:50051") as service:
        result = await service.fit(env="math", model={"builtin": {"name": "tiny-llama"}}, num_steps=20)

Same semantics as the blocking clients: the same retries for idempotent calls only, the same
typed exceptions, and WatchJob resuming after the last delivered event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc

from opentinker_api.scheduler.v1 import job_pb2, worker_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker.client import scheduler_requests as requests
from opentinker.client.artifacts import StreamWriter
from opentinker.client.credentials import resolve_api_key
from opentinker.client.errors import from_rpc_error
from opentinker.client.retry import RetryPolicy, acall_with_retry
from opentinker.client.scheduler_requests import normalize_address
from opentinker.client.service_client import (
    EventCallback, FitCollector, FitResult, MetricsCallback, fit_job_spec,
)
from opentinker.client.tls import ClientTls, open_aio_channel

CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0),)


class AsyncSchedulerClient:
    def __init__(self, url: str = "127.0.0.1:50051", *, api_key: str | None = None, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, tls: ClientTls | None = None) -> None:
        """`tls`: as SchedulerClient's."""
        self.address = normalize_address(url)
        self.channel = open_aio_channel(self.address, CHANNEL_OPTIONS, tls)
        self.stub = pb_grpc.SchedulerServiceStub(self.channel)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.metadata = requests.bearer_metadata(resolve_api_key(api_key))

    async def __aenter__(self) -> AsyncSchedulerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    async def _call(self, method: Callable, request, *, idempotent: bool = True):  # noqa: ANN001, ANN202
        return await acall_with_retry(lambda: method(request, timeout=self.timeout, metadata=self.metadata),
                                      self.retry, idempotent=idempotent)

    async def submit_job(self, spec: job_pb2.JobSpec | dict, *, request_id: str | None = None) -> job_pb2.Job:
        """Queue a job; safe to retry with the same request_id (the same job comes back)."""
        return (await self._call(self.stub.SubmitJob, requests.submit_request(spec, request_id))).job

    async def get_job(self, job_id: str) -> job_pb2.Job:
        return (await self._call(self.stub.GetJob, pb.GetJobRequest(job_id=job_id))).job

    async def _pages(self, method: Callable, make_request: Callable[[str], object], field: str) -> AsyncIterator:
        token = ""
        while True:
            response = await self._call(method, make_request(token))
            for item in getattr(response, field):
                yield item
            token = response.next_page_token
            if not token:
                return

    def list_jobs(self, *, states: list[int] | None = None, page_size: int = 50) -> AsyncIterator[job_pb2.Job]:
        """Every job the caller may see, newest first, across pages."""
        return self._pages(self.stub.ListJobs, lambda token: pb.ListJobsRequest(
            page_size=page_size, page_token=token, states=states or []), "jobs")

    async def cancel_job(self, job_id: str, *, reason: str = "", request_id: str | None = None) -> job_pb2.Job:
        return (await self._call(self.stub.CancelJob, requests.cancel_request(job_id, reason, request_id))).job

    def list_workers(self, *, role: int = 0, page_size: int = 100) -> AsyncIterator[worker_pb2.Worker]:
        """Registered workers with their devices and leases."""
        return self._pages(self.stub.ListWorkers, lambda token: pb.ListWorkersRequest(
            page_size=page_size, page_token=token, role=role), "workers")

    async def watch_job(self, job_id: str, *, after_sequence: int = 0) -> AsyncIterator[job_pb2.JobEvent]:
        """Events in order until the job ends; reconnects after a dropped stream without gaps."""
        last, retry = after_sequence, 0
        while True:
            try:
                request = pb.WatchJobRequest(job_id=job_id, after_sequence=last)
                async for response in self.stub.WatchJob(request, metadata=self.metadata):
                    last, retry = response.event.sequence, 0
                    yield response.event
                return
            except grpc.RpcError as error:
                if not self.retry.should_retry(error, retry):
                    raise from_rpc_error(error) from None
                await asyncio.sleep(self.retry.delay(retry))
                retry += 1

    def list_samples(self, job_id: str, *, step: int | None = None, split: str = "") -> AsyncIterator[job_pb2.SamplesReported]:
        """The episodes the job showed as samples, newest step first, across pages."""
        def request(token: str) -> pb.ListJobSamplesRequest:
            message = pb.ListJobSamplesRequest(job_id=job_id, split=split, page_token=token)
            if step is not None:
                message.step = step
            return message
        return self._pages(self.stub.ListJobSamples, request, "samples")

    def list_artifacts(self, job_id: str) -> AsyncIterator[pb.Artifact]:
        """The job's checkpoints (by step) and outputs, with sizes and SHA-256 sums."""
        return self._pages(self.stub.ListArtifacts, lambda token: pb.ListArtifactsRequest(
            job_id=job_id, page_token=token), "artifacts")

    async def download_artifact(self, artifact_id: str, destination: str | Path, *, path_prefix: str = "") -> list[Path]:
        """SchedulerClient.download_artifact with await (the files are written as chunks arrive)."""
        writer = StreamWriter(Path(destination), path_prefix)
        request = pb.DownloadArtifactRequest(artifact_id=artifact_id, path_prefix=path_prefix)
        try:
            async for response in self.stub.DownloadArtifact(request, metadata=self.metadata):
                writer.feed(response)
            return writer.finish()
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        finally:
            writer.abandon()

    async def wait(self, job_id: str, on_event: Callable[[job_pb2.JobEvent], None] | None = None) -> job_pb2.Job:
        """Until the job ends, calling on_event for each event; the final job."""
        async for event in self.watch_job(job_id):
            if on_event:
                on_event(event)
        return requests.ended(await self.get_job(job_id))


class AsyncServiceClient:
    """`await fit(...)`: ServiceClient.fit for asyncio code (same arguments, see fit_job_spec)."""

    def __init__(self, scheduler_url: str = "127.0.0.1:50051", *, api_key: str | None = None) -> None:
        self.scheduler = AsyncSchedulerClient(scheduler_url, api_key=api_key)

    async def __aenter__(self) -> AsyncServiceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def fit(self, *, on_metrics: MetricsCallback | None = None, on_event: EventCallback | None = None,
                  **job: Any) -> FitResult:
        """Train with RL or SFT; `job` takes ServiceClient.fit's arguments (model, env or dataset,
        num_steps, name, limits, ...: see fit_job_spec)."""
        submitted = await self.scheduler.submit_job(fit_job_spec(**job))
        return await self.follow(submitted.job_id, on_metrics=on_metrics, on_event=on_event)

    async def follow(self, job_id: str, *, on_metrics: MetricsCallback | None = None,
                     on_event: EventCallback | None = None) -> FitResult:
        collector = FitCollector(job_id, on_metrics=on_metrics, on_event=on_event)
        collector.result.job = await self.scheduler.wait(job_id, on_event=collector.handle)
        return collector.result

    async def close(self) -> None:
        await self.scheduler.close()
