"""Ending jobs: the terminal transition plus releasing every lease the job holds."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from opentinker_scheduler.events import WorkerLost
from opentinker_scheduler.job_store import JobStore, Report, Transition
from opentinker_scheduler.leases import LeaseTable
from opentinker_scheduler.model import Job, JobState, Lease

log = structlog.get_logger(__name__)
ACTIVE_STATES = (JobState.ALLOCATING, JobState.RUNNING)
REQUEUE_NOTE = "jobs are not re-queued after a worker loss yet (issue 4)"


@dataclass(frozen=True, kw_only=True)
class Lifecycle:
    store: JobStore
    leases: LeaseTable

    async def end(self, job_id: str, *, expected: JobState, to: JobState, reason: str) -> Transition:
        """expected -> terminal `to`; on success every lease of the job is released."""
        now = self.store.clock.now_ms()
        result = await self.store.transition(job_id, expected=expected, to=to, reason=reason,
                                             fields={"end_time": now, "status_message": reason})
        if result.ok:
            await self.release_all(job_id)
            await self.store.clear_stopping(job_id)
            log.info("job_ended", job_id=job_id, state=str(to), reason=reason)
        return result

    async def release_all(self, job_id: str) -> None:
        for lease in await self.leases.of_job(job_id):
            await self.leases.release(lease.lease_id)

    async def lease_lost(self, lease: Lease, *, reason: str) -> Job | None:
        """A lease of `lease.job_id` is gone (expired, worker restarted or left): end the job.

        A job whose cancel was requested ends CANCELLED, any other FAILED."""
        job = await self.store.get(lease.job_id)
        if job is None or job.state not in ACTIVE_STATES:
            return job
        await self.store.append(job.job_id, Report(payloads=[WorkerLost(
            worker_id=lease.worker_id, role=lease.role, reason=reason)]))
        to = JobState.CANCELLED if job.cancel_requested else JobState.FAILED
        message = f"lost the {lease.role.lower()} lease on worker {lease.worker_id}: {reason}"
        if to is JobState.FAILED:
            message = f"{message} ({REQUEUE_NOTE})"
        await self.end(job.job_id, expected=job.state, to=to, reason=message)
        return await self.store.get(job.job_id)
