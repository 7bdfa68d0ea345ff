"""SchedulerClient: submit, inspect, watch and cancel jobs over gRPC (blocking API).

    with SchedulerClient("127.0.0.1:50051") as scheduler:
        job = scheduler.submit_job({"type": "RL", ...})
        for event in scheduler.watch_job(job.job_id):
            print(event)

Mutating calls carry a request_id and are retried on UNAVAILABLE (the server makes the
retry idempotent); reads retry too. WatchJob resumes after the last event it delivered.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import grpc

from opentinker.api.common.v1 import model_pb2
from opentinker.api.scheduler.v1 import job_pb2
from opentinker.api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker.client.errors import OpenTinkerError, from_rpc_error
from opentinker.client.credentials import resolve_api_key
from opentinker.client.spec import job_spec_from_dict

TERMINAL_STATES = (job_pb2.Job.STATE_SUCCEEDED, job_pb2.Job.STATE_FAILED, job_pb2.Job.STATE_CANCELLED)
RETRY_CODES = (grpc.StatusCode.UNAVAILABLE,)
RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0, 4.0)


def normalize_address(url: str) -> str:
    for scheme in ("grpc://", "http://", "dns:///"):
        url = url.removeprefix(scheme)
    return url.rstrip("/")


def state_name(state: int) -> str:
    return job_pb2.Job.State.Name(state).removeprefix("STATE_")


class SchedulerClient:
    def __init__(self, url: str = "127.0.0.1:50051", *, api_key: str | None = None, timeout: float = 30.0) -> None:
        self.address = normalize_address(url)
        self.channel = grpc.insecure_channel(self.address, options=[("grpc.enable_http_proxy", 0)])
        self.stub = pb_grpc.SchedulerServiceStub(self.channel)
        self.timeout = timeout
        api_key = resolve_api_key(api_key)
        self.metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()

    def __enter__(self) -> "SchedulerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _call(self, method: Callable, request, *, retry: bool = True):
        delays = RETRY_DELAYS if retry else ()
        for attempt in range(len(delays) + 1):
            try:
                return method(request, timeout=self.timeout, metadata=self.metadata)
            except grpc.RpcError as error:
                if error.code() not in RETRY_CODES or attempt == len(delays):
                    raise from_rpc_error(error) from None
                time.sleep(delays[attempt])
        raise AssertionError("unreachable")

    def submit_job(self, spec: job_pb2.JobSpec | dict, *, request_id: str | None = None) -> job_pb2.Job:
        """Queue a job; safe to retry with the same request_id (the same job comes back)."""
        message = job_spec_from_dict(spec) if isinstance(spec, dict) else spec
        request = pb.SubmitJobRequest(request_id=request_id or str(uuid.uuid4()), spec=message)
        return self._call(self.stub.SubmitJob, request).job

    def get_job(self, job_id: str) -> job_pb2.Job:
        return self._call(self.stub.GetJob, pb.GetJobRequest(job_id=job_id)).job

    def list_jobs(self, *, states: list[int] | None = None, page_size: int = 50) -> Iterator[job_pb2.Job]:
        """Every job, newest first, across pages."""
        token = ""
        while True:
            request = pb.ListJobsRequest(page_size=page_size, page_token=token, states=states or [])
            response = self._call(self.stub.ListJobs, request)
            yield from response.jobs
            token = response.next_page_token
            if not token:
                return

    def cancel_job(self, job_id: str, *, reason: str = "") -> job_pb2.Job:
        request = pb.CancelJobRequest(job_id=job_id, request_id=str(uuid.uuid4()), reason=reason)
        return self._call(self.stub.CancelJob, request).job

    def watch_job(self, job_id: str, *, after_sequence: int = 0) -> Iterator[job_pb2.JobEvent]:
        """Events in order until the job ends; reconnects after a dropped stream without gaps."""
        last, failures = after_sequence, 0
        while True:
            try:
                request = pb.WatchJobRequest(job_id=job_id, after_sequence=last)
                for response in self.stub.WatchJob(request, metadata=self.metadata):
                    last, failures = response.event.sequence, 0
                    yield response.event
                return
            except grpc.RpcError as error:
                failures += 1
                if error.code() not in RETRY_CODES or failures > len(RETRY_DELAYS):
                    raise from_rpc_error(error) from None
                time.sleep(RETRY_DELAYS[failures - 1])

    def wait(self, job_id: str, on_event: Callable[[job_pb2.JobEvent], None] | None = None) -> job_pb2.Job:
        """Block until the job ends, calling on_event for each event; the final job."""
        for event in self.watch_job(job_id):
            if on_event:
                on_event(event)
        job = self.get_job(job_id)
        if job.state not in TERMINAL_STATES:
            raise OpenTinkerError(f"event stream of {job_id} ended while the job is {state_name(job.state)}")
        return job


class InferenceSchedulerClient(SchedulerClient):
    """Inference jobs: run an environment's episodes with a fixed model, write JSONL."""

    def submit_inference_job(self, *, model: model_pb2.ModelReference | dict, env_name: str,
                             num_episodes: int = 32, output_path: str = "", env_config: dict | None = None,
                             envhost_address: str = "", max_new_tokens: int = 32,
                             request_id: str | None = None) -> job_pb2.Job:
        model_dict = model if isinstance(model, dict) else _message_dict(model)
        spec = {
            "type": "INFERENCE",
            "policy": {"model": model_dict, "sampling": {"max_new_tokens": max_new_tokens}},
            "environment": {"env_name": env_name, "config": env_config or {}, "envhost_address": envhost_address},
            "inference": {"num_episodes": num_episodes, "output_path": output_path},
        }
        return self.submit_job(spec, request_id=request_id)


def _message_dict(message) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(message, preserving_proto_field_name=True)
