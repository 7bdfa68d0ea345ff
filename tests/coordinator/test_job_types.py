"""Which job types a Coordinator drives: RL, SFT and INFERENCE; a SESSION job (the Tinker gateway's)
is refused with a message naming the field and the driver it belongs to."""

from __future__ import annotations

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_coordinator.driver.job_plans import UnsupportedJob, check_driven_here


@pytest.mark.parametrize("job_type", [job_pb2.JOB_TYPE_RL, job_pb2.JOB_TYPE_SFT, job_pb2.JOB_TYPE_INFERENCE])
def test_a_coordinator_drives_rl_sft_and_inference_jobs(job_type: int) -> None:
    check_driven_here(job_pb2.JobSpec(type=job_type))


def test_a_session_job_is_refused_as_the_gateways() -> None:
    with pytest.raises(UnsupportedJob) as refused:
        check_driven_here(job_pb2.JobSpec(type=job_pb2.JOB_TYPE_SESSION))
    assert str(refused.value).startswith("spec.type: a JOB_TYPE_SESSION job is driven by the Tinker gateway")


@pytest.mark.parametrize("job_type, shown", [(job_pb2.JOB_TYPE_UNSPECIFIED, "JOB_TYPE_UNSPECIFIED"), (99, "99")])
def test_an_unknown_job_type_is_refused_by_name_or_number(job_type: int, shown: str) -> None:
    with pytest.raises(UnsupportedJob, match=f"^spec.type: {shown} is not a job type a Coordinator drives"):
        check_driven_here(job_pb2.JobSpec(type=job_type))
