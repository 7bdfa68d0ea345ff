"""Which job types a Coordinator drives: RL, SFT and INFERENCE; a SESSION job (the Tinker gateway's)
is refused with a message naming the field and the driver it belongs to. A type that is not a job
type at all never resolves into a plan."""

from __future__ import annotations

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.jobplan import JobKind, ResolveError, resolve_job_plan
from opentinker_coordinator.driver.job_plans import UnsupportedJob, check_driven_here


@pytest.mark.parametrize("kind", [JobKind.RL, JobKind.SFT, JobKind.INFERENCE])
def test_a_coordinator_drives_rl_sft_and_inference_jobs(kind: JobKind) -> None:
    check_driven_here(kind)


def test_a_session_job_is_refused_as_the_gateways() -> None:
    with pytest.raises(UnsupportedJob) as refused:
        check_driven_here(JobKind.SESSION)
    assert str(refused.value).startswith("spec.type: a JOB_TYPE_SESSION job is driven by the Tinker gateway")


@pytest.mark.parametrize("job_type, words", [(job_pb2.JOB_TYPE_UNSPECIFIED, "must be set"),
                                             (99, "99 is not a known JobType value")])
def test_an_unknown_job_type_is_refused_naming_the_field(job_type: int, words: str) -> None:
    with pytest.raises(ResolveError, match=f"^spec.type: {words}"):
        resolve_job_plan(job_pb2.JobSpec(type=job_type))
