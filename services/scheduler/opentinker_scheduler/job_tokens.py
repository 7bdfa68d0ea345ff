"""Job tokens on the Scheduler's side: drafted before an attempt starts, handed out afterwards.

`draft()` draws the attempt's nonce and the SHA-256 of its token; the START script stores both
with the attempt's fencing tokens (or nothing, when the job does not start). `token_for(job)`
derives the token again from the stored nonce, for the worker's Heartbeat and an admin's GetJob,
on any replica, and after a restart: the key comes from the service key they share
(`opentinker_runtime.auth.job_tokens`). Without a service key (OPENTINKER_AUTH=disabled) no worker checks
tokens, and none are issued.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from opentinker_runtime.auth.job_tokens import derive_job_token, hash_job_token, job_token_key, new_nonce
from opentinker_scheduler.errors import PermissionDenied
from opentinker_scheduler.model import Caller, Job, JobState


@dataclass(frozen=True, kw_only=True)
class JobTokenDraft:
    """What START stores for an attempt: the nonce and the token's hash (never the token)."""

    nonce: str
    token_hash: str


@dataclass(frozen=True, kw_only=True)
class JobTokenIssuer:
    key: bytes | None
    """None: no tokens (auth disabled)."""

    @classmethod
    def for_service_key(cls, service_key: str) -> JobTokenIssuer:
        """Every replica holding the same service key issues the same tokens."""
        return cls(key=job_token_key(service_key) if service_key else None)

    def draft(self, job_id: str) -> JobTokenDraft:
        if self.key is None:
            return JobTokenDraft(nonce="", token_hash="")
        nonce = new_nonce()
        return JobTokenDraft(nonce=nonce, token_hash=hash_job_token(derive_job_token(self.key, job_id, nonce)))

    def token_for(self, job: Job) -> str:
        """The running attempt's token; "" when the job runs no attempt (or without tokens)."""
        return self.token_of(job.job_id, job.state, job.job_token_nonce)

    def token_of(self, job_id: str, state: JobState, nonce: str) -> str:
        """`token_for` from the job's id, state and stored nonce alone."""
        if self.key is None or state is not JobState.RUNNING or not nonce:
            return ""
        return derive_job_token(self.key, job_id, nonce)

    def require_current(self, job: Job, token: str) -> None:
        """Return when `token` is the running attempt's token of `job`; PermissionDenied otherwise
        (CheckJobToken: how an EnvHost a tenant serves itself checks the jobs that call it)."""
        expected = self.token_for(job)
        if not expected or not hmac.compare_digest(expected.encode(), token.encode()):
            raise PermissionDenied(f"job_token: not the current attempt's token of job {job.job_id} (forged, "
                                   "from an earlier attempt, or the job runs no attempt)", reason="JOB_TOKEN_INVALID")

    def token_shown_to(self, caller: Caller, job: Job) -> str:
        """GetJob shows the token to admin (service) keys only: the Coordinator learns it there."""
        return self.token_for(job) if caller.admin else ""
