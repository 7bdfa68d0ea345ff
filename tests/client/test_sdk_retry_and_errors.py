"""The SDK's typed errors and its retry rule (idempotent calls only), against a real gRPC server
whose SchedulerService answers UNAVAILABLE a chosen number of times."""

from __future__ import annotations

import asyncio
import threading
from concurrent import futures

import grpc
import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker.client import (
    AsyncSchedulerClient, FailedPrecondition, NotFound, OpenTinkerError, ResourceExhausted, RetryPolicy,
    SchedulerClient, Unavailable,
)
from opentinker.client.errors import error_for
from opentinker_runtime.core.errors import REASON_METADATA_KEY

FAST = RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.02)


class FlakyScheduler(pb_grpc.SchedulerServiceServicer):
    """Fails the first `failures` calls of each method with UNAVAILABLE; counts every call."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls, self.lock = failures, {}, threading.Lock()
        self.request_ids: list[str] = []

    def _attempt(self, name: str, context: grpc.ServicerContext) -> None:
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1
            count = self.calls[name]
        if count <= self.failures:
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")

    def GetJob(self, request, context):  # noqa: N802
        self._attempt("GetJob", context)
        if request.job_id == "missing":
            context.set_trailing_metadata(((REASON_METADATA_KEY, "ERROR_REASON_JOB_NOT_FOUND"),))
            context.abort(grpc.StatusCode.NOT_FOUND, "job missing does not exist")
        return pb.GetJobResponse(job=job_pb2.Job(job_id=request.job_id))

    def SubmitJob(self, request, context):  # noqa: N802
        self.request_ids.append(request.request_id)
        self._attempt("SubmitJob", context)
        return pb.SubmitJobResponse(job=job_pb2.Job(job_id="job-1"))

    def CreateApiKey(self, request, context):  # noqa: N802
        self._attempt("CreateApiKey", context)
        return pb.CreateApiKeyResponse(secret="s")


@pytest.fixture
def flaky():
    def start(failures: int) -> tuple[FlakyScheduler, str]:
        servicer = FlakyScheduler(failures)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_SchedulerServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return servicer, f"127.0.0.1:{port}"

    servers: list[grpc.Server] = []
    yield start
    for server in servers:
        server.stop(None)


def test_reads_and_deduplicated_writes_are_retried_through_unavailable(flaky):
    servicer, address = flaky(failures=2)
    with SchedulerClient(address, api_key="k", retry=FAST) as client:
        assert client.get_job("j1").job_id == "j1"
        assert client.submit_job({"type": "RL"}).job_id == "job-1"
    assert servicer.calls == {"GetJob": 3, "SubmitJob": 3}
    # every retry of the submission carried the same request_id: the server returns one job
    assert len(set(servicer.request_ids)) == 1 and len(servicer.request_ids) == 3


def test_a_call_that_would_repeat_its_work_is_not_retried(flaky):
    servicer, address = flaky(failures=1)
    with SchedulerClient(address, api_key="k", retry=FAST) as client, pytest.raises(Unavailable) as caught:
        client.create_api_key("acme")
    assert servicer.calls == {"CreateApiKey": 1}
    assert caught.value.code == "UNAVAILABLE" and "restarting" in str(caught.value)


def test_retries_stop_after_the_policys_attempts(flaky):
    servicer, address = flaky(failures=10)
    with SchedulerClient(address, api_key="k", retry=FAST) as client, pytest.raises(Unavailable):
        client.get_job("j1")
    assert servicer.calls == {"GetJob": FAST.attempts}


def test_errors_are_typed_and_carry_the_reason(flaky):
    _, address = flaky(failures=0)
    with SchedulerClient(address, api_key="k", retry=FAST) as client, pytest.raises(NotFound) as caught:
        client.get_job("missing")
    assert caught.value.reason == "JOB_NOT_FOUND"
    assert caught.value.details == "job missing does not exist"
    assert isinstance(caught.value, OpenTinkerError)


def test_the_async_client_retries_the_same_way(flaky):
    servicer, address = flaky(failures=2)

    async def scenario() -> str:
        async with AsyncSchedulerClient(address, api_key="k", retry=FAST) as client:
            job = await client.get_job("j2")
            with pytest.raises(NotFound):
                await client.get_job("missing")
            return job.job_id

    assert asyncio.run(scenario()) == "j2"
    assert servicer.calls["GetJob"] == 4  # two UNAVAILABLE, one answer, then NOT_FOUND at once


def test_an_unreachable_scheduler_is_unavailable_after_backing_off():
    policy = RetryPolicy(attempts=3, initial_delay=0.01)
    with SchedulerClient("127.0.0.1:1", api_key="k", retry=policy) as client, pytest.raises(Unavailable):
        client.get_job("j")


def test_each_status_code_maps_to_its_class():
    assert isinstance(error_for("RESOURCE_EXHAUSTED", "quota"), ResourceExhausted)
    assert isinstance(error_for("FAILED_PRECONDITION", "x", "ERROR_REASON_JOB_NOT_CANCELLABLE"), FailedPrecondition)
    assert error_for("FAILED_PRECONDITION", "x", "ERROR_REASON_JOB_NOT_CANCELLABLE").reason == "JOB_NOT_CANCELLABLE"
    unknown = error_for("DATA_LOSS", "gone")
    assert type(unknown) is OpenTinkerError and unknown.code == "DATA_LOSS"
