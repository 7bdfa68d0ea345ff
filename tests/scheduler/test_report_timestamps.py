"""ReportJobEvents checks the caller before it reads the events: a tenant key is refused whatever
it sends, and an admin's out-of-range timestamp is INVALID_ARGUMENT naming the field (it was
UNKNOWN with a traceback in the log, to tenants too, as conversion ran first)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from opentinker_api.common.v1 import progress_pb2, resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.channels import authenticated_channel
from tests.scheduler._auth_server import ADMIN_KEY, scheduler_server
from tests.scheduler._harness import register_pool, rpc_error, running_job
from tests.scheduler._tenants import new_tenant

pytestmark = pytest.mark.timeout(60)

BAD_TIMES = {
    "seconds past year 9999": dict(seconds=2**62),
    "seconds before year 1": dict(seconds=-(2**62)),
    "negative nanos": dict(seconds=1, nanos=-5),
}
FIELD = "events[1].progress.progress.update_time"


def report_with(lease: resources_pb2.LeaseContext, **stamp: int) -> pb.ReportJobEventsRequest:
    progress = progress_pb2.JobProgress(step=1)
    progress.update_time.seconds = stamp["seconds"]
    progress.update_time.nanos = stamp.get("nanos", 0)
    return pb.ReportJobEventsRequest(lease=lease, request_id="bad-time", events=[
        job_pb2.JobEvent(log=job_pb2.LogLine(message="ok")),
        job_pb2.JobEvent(progress=job_pb2.ProgressUpdated(progress=progress))])


@pytest.mark.parametrize("stamp", BAD_TIMES.values(), ids=BAD_TIMES.keys())
def test_an_out_of_range_timestamp_is_refused_by_caller_then_by_field(redis_url: str, stamp: dict) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)
            lease = next(a.lease for a in job.assignments if a.role == resources_pb2.ROLE_COORDINATOR)
            tenant_key = await new_tenant(h, "mallory")
            async with authenticated_channel(h.address, tenant_key) as channel:
                denied = await rpc_error(pb_grpc.SchedulerServiceStub(channel).ReportJobEvents(
                    report_with(lease, **stamp)))
            assert denied.code() == grpc.StatusCode.PERMISSION_DENIED, denied.details()

            token = job.assignments[0].job_token
            async with authenticated_channel(h.address, ADMIN_KEY, job_token=token) as channel:
                stub = pb_grpc.SchedulerServiceStub(channel)
                invalid = await rpc_error(stub.ReportJobEvents(report_with(lease, **stamp)))
                assert invalid.code() == grpc.StatusCode.INVALID_ARGUMENT, invalid.details()
                assert invalid.details().startswith(f"{FIELD}: ")
                assert "range" in invalid.details()
                events = (await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job.last_event_sequence
                assert events == job.last_event_sequence, "nothing of a refused report is stored"

    asyncio.run(scenario())
