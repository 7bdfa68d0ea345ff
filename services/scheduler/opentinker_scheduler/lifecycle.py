"""Ending jobs: the terminal transition plus releasing every lease the job holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from opentinker_runtime.auth.job_tokens import FENCING_FIELD, HASH_FIELD, NONCE_FIELD
from opentinker_runtime.edge.lease import LeaseContext
from opentinker_scheduler.events import WorkerLost
from opentinker_scheduler.job_store import Finished, JobStore, Report, Transition
from opentinker_scheduler.model import Assignment, Job, JobState, JobType, Lease, LeasedJob

log = structlog.get_logger(__name__)
ACTIVE_STATES = (JobState.ALLOCATING, JobState.RUNNING)


@dataclass(frozen=True, kw_only=True)
class Lifecycle:
    store: JobStore

    async def end(self, job_id: str, *, expected: JobState, to: JobState, reason: str) -> Transition:
        """expected -> terminal `to`; the same script releases every lease of the job."""
        now = self.store.clock.now_ms()
        result = await self.store.transition(job_id, expected=expected, to=to, reason=reason,
                                             fields={"end_time": now, "status_message": reason})
        if result.ok:
            log.info("job_ended", job_id=job_id, state=str(to), reason=reason)
        return result

    async def finish(self, lease: LeaseContext, final_state: JobState, *,
                     reason: Callable[[JobState], str]) -> Finished:
        """The Coordinator's end of a RUNNING job, in one step (see `JobStore.finish_running`)."""
        finished = await self.store.finish_running(lease, final_state=final_state, reason=reason)
        if finished.job is not None:
            log.info("job_ended", job_id=lease.job_id, state=finished.state, reason=finished.job.status_message)
        return finished

    async def lease_lost(self, lease: Lease, *, reason: str) -> Job | None:
        """A lease of `lease.job_id` is gone (expired, worker restarted or left).

        The job is re-queued (resuming from its last checkpoint) while it has retries left;
        a job whose cancel was requested ends CANCELLED; one without retries left, and a SESSION
        job always (its client's state cannot be replayed), FAILED."""
        job = await self.store.get(lease.job_id)
        if job is None or job.state not in ACTIVE_STATES or not holds(job, lease.lease_id):
            return job  # an earlier attempt's lease: that attempt was handled already
        await self.store.append(job.job_id, Report(payloads=[WorkerLost(
            worker_id=lease.worker_id, role=lease.role, reason=reason)]))
        lost = f"lost the {lease.role.lower()} lease on worker {lease.worker_id}: {reason}"
        if job.cancel_requested:
            await self.end(job.job_id, expected=job.state, to=JobState.CANCELLED, reason=lost)
        elif job.retries_left > 0 and job.type is not JobType.SESSION:
            await self.requeue(job, lost)
        else:
            await self.end(job.job_id, expected=job.state, to=JobState.FAILED, reason=f"{lost}; {why_not_retried(job)}")
        return await self.store.get(job.job_id)

    async def lost_without_lease(self, job_id: str, assignment: Assignment) -> None:
        """A RUNNING job's assignment whose lease record vanished: handle it as a lost lease."""
        lease = Lease(lease_id=assignment.lease.lease_id, job_id=job_id, worker_id=assignment.worker_id,
                      role=assignment.role, slots=(), device_ids=assignment.device_ids,
                      fencing_token=assignment.lease.fencing_token, expire_time_ms=0)
        log.warning("lease_vanished", job_id=job_id, lease_id=lease.lease_id, worker_id=lease.worker_id)
        await self.lease_lost(lease, reason="its lease vanished (a scheduler stopped between releasing "
                                            "the lease and re-queueing the job)")

    async def requeue(self, job: Job, why: str) -> Transition:
        """Back to QUEUED with one retry fewer; the next attempt resumes from `resume_from`.
        The attempt's job token stops verifying at once (the next attempt gets a new one)."""
        start = (f"from checkpoint {job.resume_from.checkpoint_id} (step {job.resume_from.step})"
                 if job.resume_from else "from the start (no checkpoint saved yet)")
        left = job.retries_left - 1
        message = f"{why}; re-queued to resume {start}, {left} retr{'y' if left == 1 else 'ies'} left"
        result = await self.store.transition(job.job_id, expected=job.state, to=JobState.QUEUED,
                                             reason=message, fields={
                                                 "status_message": message, "assignments": "[]",
                                                 "retries_left": left, NONCE_FIELD: "", HASH_FIELD: "",
                                                 FENCING_FIELD: ""})
        if result.ok:  # the transition released the job's leases
            log.warning("job_requeued", job_id=job.job_id, attempt=job.attempt, retries_left=left)
        return result


def why_not_retried(job: Job) -> str:
    if job.type is JobType.SESSION:
        return ("a SESSION job is never retried: its client's state (the steps it sent through the "
                "gateway) cannot be replayed; start a new training client")
    return f"no retries left after {job.attempt} attempt{'s' * (job.attempt != 1)} (spec.training.max_retries)"


def holds(job: Job | LeasedJob, lease_id: str) -> bool:
    """Whether `lease_id` is one of the job's current assignments (not an earlier attempt's)."""
    return any(a.lease.lease_id == lease_id for a in job.assignments)
