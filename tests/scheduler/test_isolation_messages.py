"""What one tenant's job says about another tenant's: never its id."""

from opentinker_scheduler.allocator import waiting_behind
from opentinker_scheduler.model import JobState, QueuedJob


def queued(job_id: str, tenant_id: str) -> QueuedJob:
    return QueuedJob(job_id=job_id, tenant_id=tenant_id, state=JobState.QUEUED, resources=(), device_count=1,
                     create_time_ms=0)


def test_a_job_waiting_behind_another_tenants_job_is_not_told_its_id() -> None:
    starving = queued("job-of-acme", "acme")
    assert waiting_behind(queued("job-b", "globex"), starving, 11) == (
        "waiting behind another tenant's job, which has waited 11 s: no backfilling past it until it starts")
    assert waiting_behind(queued("job-a2", "acme"), starving, 11).startswith("waiting behind job job-of-acme,")
