"""Reading a job's events through WatchJob."""

from __future__ import annotations

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb


async def collect(stub, job_id: str, after: int = 0, follow: bool = False,  # noqa: ANN001
                  timeout: float = 5.0) -> list[job_pb2.JobEvent]:
    request = pb.WatchJobRequest(job_id=job_id, after_sequence=after, follow_after_end=follow)
    return [response.event async for response in stub.WatchJob(request, timeout=timeout)]
