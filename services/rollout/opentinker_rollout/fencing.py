"""Fencing tokens: refuse a job's calls that carry a lower token than the highest seen.

A zombie coordinator of an earlier attempt still holds the old (lower) token, so its weight
updates or episode runs cannot interleave with the current attempt's.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentinker_rollout.errors import StaleFencingToken


@dataclass(frozen=True, kw_only=True)
class Lease:
    """Domain twin of common.v1.LeaseContext; an empty job_id means "no lease" (dev use)."""

    job_id: str = ""
    lease_id: str = ""
    fencing_token: int = 0


class FencingGuard:
    """Highest fencing token seen per job."""

    def __init__(self) -> None:
        self._highest: dict[str, int] = {}

    def check(self, lease: Lease) -> None:
        """Record the lease's token, or raise StaleFencingToken when it is below the highest."""
        if not lease.job_id:
            return
        highest = self._highest.get(lease.job_id, lease.fencing_token)
        if lease.fencing_token < highest:
            raise StaleFencingToken(
                f"lease.fencing_token {lease.fencing_token} of job {lease.job_id!r} is stale: "
                f"this worker has seen token {highest}")
        self._highest[lease.job_id] = lease.fencing_token

    def raise_floor(self, job_id: str, fencing_token: int) -> None:
        """A newer attempt exists (the Scheduler said so): lower tokens are stale from now on."""
        if job_id:
            self._highest[job_id] = max(fencing_token, self._highest.get(job_id, fencing_token))

    def highest(self, job_id: str) -> int | None:
        return self._highest.get(job_id)
