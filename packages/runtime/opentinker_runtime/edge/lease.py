"""The lease a call presents, and the fencing rule every worker applies to it. No grpc here.

A zombie of an earlier attempt (a Coordinator that lost its lease, a retried call) still holds
the old, lower fencing token: a worker that has seen a higher one for the job refuses it, so the
old attempt's calls cannot interleave with the current one's. The Scheduler also tells a worker
which attempt it assigned it (`attempt_assigned`): that token becomes the job's floor at once, and
what that attempt opened stays alive past idle timeouts (`holds`) until the job stops here.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentinker_runtime.edge.errors import Code, DomainError


@dataclass(frozen=True, kw_only=True)
class LeaseContext:
    """Domain twin of common.v1.LeaseContext; an empty job_id means "no lease" (a call outside
    any job: Tinker-style primitives, development)."""

    job_id: str = ""
    lease_id: str = ""
    fencing_token: int = 0


class StaleFencingToken(DomainError):
    """A lease's fencing token is lower than the highest this worker has seen for the job."""

    code = Code.FAILED_PRECONDITION
    reason = "STALE_FENCING_TOKEN"

    def __init__(self, job_id: str, token: int, highest: int, *, worker: str) -> None:
        super().__init__(f"{token} is stale for job {job_id!r}; this {worker} has seen {highest} "
                         "(a newer attempt owns the job)", field="lease.fencing_token")
        self.job_id, self.token, self.highest = job_id, token, highest


class FencingGuard:
    """Per job: the highest fencing token seen, and the attempt the Scheduler assigned this
    worker. `worker` names this worker in refusals ("trainer", "rollout worker")."""

    def __init__(self, *, worker: str) -> None:
        self.worker = worker
        self._highest: dict[str, int] = {}
        self._assigned: dict[str, int] = {}

    def check(self, lease: LeaseContext) -> None:
        """Remember the lease's token, or raise StaleFencingToken when it is below the highest
        seen for its job. A lease without a job is not fenced."""
        if not lease.job_id:
            return
        highest = self._highest.get(lease.job_id, 0)
        if lease.fencing_token < highest:
            raise StaleFencingToken(lease.job_id, lease.fencing_token, highest, worker=self.worker)
        self._highest[lease.job_id] = lease.fencing_token

    def attempt_assigned(self, job_id: str, fencing_token: int) -> None:
        """The Scheduler assigned this worker the attempt holding `fencing_token`: lower tokens
        are stale from now on, and what that attempt opens is held (`holds`)."""
        if not job_id:
            return
        self._highest[job_id] = max(fencing_token, self._highest.get(job_id, 0))
        self._assigned[job_id] = max(fencing_token, self._assigned.get(job_id, 0))

    def job_stopped(self, job_id: str) -> None:
        """The Scheduler no longer runs `job_id` here: nothing of it is held any more (its floor
        stays: a late call of a stopped attempt is still stale)."""
        self._assigned.pop(job_id, None)

    def holds(self, job_id: str, fencing_token: int) -> bool:
        """Whether something opened by the attempt holding `fencing_token` belongs to the attempt
        the Scheduler assigned this worker (it outlives idle timeouts)."""
        assigned = self._assigned.get(job_id)
        return assigned is not None and fencing_token >= assigned

    def highest(self, job_id: str) -> int | None:
        """The highest token seen for `job_id` (None: none yet)."""
        return self._highest.get(job_id)
