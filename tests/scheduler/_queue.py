"""The queue-policy tests' kit: a pool of fake workers, submitting and reading jobs, and the tiny
SFT spec they queue."""

from __future__ import annotations

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from tests.scheduler._harness import register_request, rl_spec

S = job_pb2.Job


def sft_spec(priority: int = 0, trainer_devices: int = 1) -> job_pb2.JobSpec:
    spec = rl_spec(priority=priority)
    spec.type = job_pb2.JOB_TYPE_SFT
    spec.environment.Clear()
    spec.dataset.path = "/data/chat.jsonl"
    spec.resources.add(role=resources_pb2.ROLE_TRAINER, device_count=trainer_devices)
    return spec


async def submit(h, name: str, spec: job_pb2.JobSpec) -> str:  # noqa: ANN001
    return (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=name, spec=spec))).job.job_id


async def get(h, job_id: str) -> job_pb2.Job:  # noqa: ANN001
    return (await h.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job


async def pool(h, trainer_devices: int) -> None:  # noqa: ANN001
    await h.stub.RegisterWorker(register_request("trainer-1", "trainer", trainer_devices))
    await h.stub.RegisterWorker(register_request("coord-1", "coordinator", 0))


async def running(h, job_ids: list[str]) -> set[str]:  # noqa: ANN001
    return {j for j in job_ids if (await get(h, j)).state == S.STATE_RUNNING}
