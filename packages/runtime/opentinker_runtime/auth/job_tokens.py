"""Per-job tokens: the credential of one attempt of one job, checked by every worker it calls.

When the Scheduler starts an attempt it draws a random nonce and derives the attempt's token,
`otj_<43 characters>` = base64url(HMAC-SHA256(key, job_id + "\\n" + nonce)), with a key derived
from the service key every Scheduler replica shares (so any replica can hand the token out again
on a later Heartbeat or GetJob). The job's Redis hash keeps the nonce, SHA-256(token) and the
attempt's fencing tokens, all written by the START script; never the token. A re-queue clears
them, so an earlier attempt's token stops verifying.

Workers verify a presented token against that hash (`JobTokenVerifier`, positive answers cached
for a few seconds by (job, token hash, fencing token), so a training step costs no Redis round
trip; a cached answer of an attempt dies as soon as a read shows the job moved on). A job the Scheduler does not know (no record at all) is not job-scoped: such calls keep the
admin-key rule (Tinker-style primitives, benchmarks with made-up job ids). A known job without a
current attempt (queued, re-queued) verifies nothing.

No grpc here: `opentinker_runtime.edge.job_token` turns a verdict into a call's refusal.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio

from opentinker_runtime.core.redis_store import Keys

JOB_TOKEN_PREFIX = "otj"
JOB_TOKEN_PATTERN = re.compile(r"^otj_[A-Za-z0-9_-]{43}$")
JOB_TOKEN_METADATA_KEY = "x-opentinker-job-token"
"""gRPC metadata entry that carries the job token on every job-scoped call."""
JOB_ID_METADATA_KEY = "x-opentinker-job-id"
"""The job a token is presented for, on calls that carry the token as their only credential (to an
EnvHost: the job's token, never a service key, goes to an address a tenant may have chosen)."""
NONCE_FIELD, HASH_FIELD, FENCING_FIELD = "job_token_nonce", "job_token_hash", "job_token_fencing"
"""Fields of the job's hash (`ot:job:<id>`) the START script writes and a re-queue clears."""
_KEY_LABEL = b"opentinker job tokens v1"
RUNNING_STATE = b"RUNNING"
"""The job hash's `state` while an attempt runs."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def job_token_key(service_key: str) -> bytes:
    """The HMAC key for job tokens, derived from the service key all Scheduler replicas share."""
    return hmac.new(_KEY_LABEL, service_key.encode(), hashlib.sha256).digest()


def new_nonce() -> str:
    """A fresh 256-bit nonce: one per attempt, so every attempt's token is new."""
    return _b64(secrets.token_bytes(32))


def derive_job_token(key: bytes, job_id: str, nonce: str) -> str:
    """The token of the attempt of `job_id` started with `nonce`."""
    digest = hmac.new(key, f"{job_id}\n{nonce}".encode(), hashlib.sha256).digest()
    return f"{JOB_TOKEN_PREFIX}_{_b64(digest)}"


def hash_job_token(token: str) -> str:
    """What Redis keeps of a token (hex SHA-256): enough to verify it, useless to present."""
    return hashlib.sha256(token.encode()).hexdigest()


def presented_job_token(metadata: Iterable[tuple[str, str | bytes]]) -> str:
    """The job token a call carries in its metadata ("" when none)."""
    for name, value in metadata:
        if name.lower() == JOB_TOKEN_METADATA_KEY and isinstance(value, str):
            return value.strip()
    return ""


def presented_job_id(metadata: Iterable[tuple[str, str | bytes]]) -> str:
    """The job id a call names in its metadata ("" when none)."""
    for name, value in metadata:
        if name.lower() == JOB_ID_METADATA_KEY and isinstance(value, str):
            return value.strip()
    return ""


def job_call_metadata(job_id: str, token: str) -> tuple[tuple[str, str], ...]:
    """The metadata of a call whose only credential is the job's token (none without a token)."""
    return ((JOB_TOKEN_METADATA_KEY, token), (JOB_ID_METADATA_KEY, job_id)) if token else ()


def job_token_of(job) -> str:  # noqa: ANN001 - a scheduler.v1.Job message
    """The attempt's token in a job fetched with an admin key ("" when it carries none)."""
    return next((a.job_token for a in job.assignments if a.job_token), "")


def fencing_tokens_text(tokens: Iterable[int]) -> str:
    """The FENCING_FIELD value for an attempt's fencing tokens (the START script writes the same)."""
    return ",".join(str(token) for token in tokens)


@dataclass(frozen=True, kw_only=True)
class JobTokenVerdict:
    """Whether a call may act on a job, and why not when it may not."""

    allowed: bool
    problem: str = ""


def judge(record: list[bytes | None], token: str, fencing_token: int | None) -> JobTokenVerdict:
    """The verdict for `token` given the job's [state, token hash, fencing tokens] fields."""
    state, expected, fencing = record
    if state is None:  # not a job of the Scheduler: the admin-key rule alone applies
        return JobTokenVerdict(allowed=True)
    if not expected:
        return JobTokenVerdict(allowed=False, problem="the job has no running attempt")
    if not token:
        return JobTokenVerdict(allowed=False, problem="the call carries no job token")
    if not JOB_TOKEN_PATTERN.match(token) or not hmac.compare_digest(expected.decode(), hash_job_token(token)):
        return JobTokenVerdict(allowed=False, problem="the job token is not the current attempt's "
                                                      "(forged, or from an earlier attempt)")
    if fencing_token is not None and str(fencing_token) not in (fencing or b"").decode().split(","):
        return JobTokenVerdict(allowed=False, problem=f"fencing token {fencing_token} is not one of "
                                                      "the current attempt's leases")
    return JobTokenVerdict(allowed=True)


def attempt_of(record: list[bytes | None]) -> str:
    """Which attempt a job record shows: its fencing tokens ("" between attempts, "unknown job")."""
    state, _, fencing = record
    return "unknown job" if state is None else (fencing or b"").decode()


class JobTokenVerifier:
    """Checks presented job tokens against the job records in Redis, caching positive verdicts
    for `ttl_seconds` by (job, token hash, fencing token). A cached verdict holds only while the
    last read of the job showed the same attempt: once a call of the next attempt (or any call
    after a re-queue) made this verifier read the job again, the earlier attempt's token is
    checked against Redis, and refused. What remains is a window of at most `ttl_seconds` between
    a re-queue and the first call this worker sees afterwards."""

    def __init__(self, client: redis.asyncio.Redis, *, keys: Keys = Keys(), ttl_seconds: float = 5.0,
                 max_entries: int = 10_000) -> None:
        self.client = client
        self.keys = keys
        self.ttl = ttl_seconds
        self.max_entries = max_entries
        self._allowed: dict[tuple[str, str, int | None], tuple[float, str]] = {}
        self._attempts: dict[str, str] = {}
        """The attempt each job's last read showed."""

    async def tenant_of(self, job_id: str, token: str) -> str | None:
        """The tenant of `job_id` when `token` is its running attempt's token; None otherwise (an
        unknown or ended job too: a token alone is a credential only while the Scheduler runs its job)."""
        record = await self.client.hmget(self.keys.job(job_id), ["state", HASH_FIELD, FENCING_FIELD, "tenant_id"])
        if record[0] != RUNNING_STATE or not judge(record[:3], token, None).allowed:
            return None
        return (record[3] or b"").decode()

    def allowed_cached(self, job_id: str, token: str, fencing_token: int | None = None) -> bool:
        """Whether a cached verdict lets `token` act on `job_id` now, without reading Redis (False
        is no refusal: `verify` decides)."""
        until, attempt = self._allowed.get((job_id, hash_job_token(token), fencing_token), (0.0, ""))
        return until > time.monotonic() and attempt == self._attempts.get(job_id)

    async def verify(self, job_id: str, token: str, fencing_token: int | None = None) -> JobTokenVerdict:
        """May a call presenting `token` act on `job_id` (with `fencing_token`, when it has a lease)?"""
        entry = (job_id, hash_job_token(token), fencing_token)
        now = time.monotonic()
        until, attempt = self._allowed.get(entry, (0.0, ""))
        if until > now and attempt == self._attempts.get(job_id):
            return JobTokenVerdict(allowed=True)
        record = await self.client.hmget(self.keys.job(job_id), ["state", HASH_FIELD, FENCING_FIELD])
        verdict = judge(record, token, fencing_token)
        self._remember(job_id, attempt_of(record), entry if verdict.allowed else None, now)
        return verdict

    def _remember(self, job_id: str, attempt: str, allowed: tuple[str, str, int | None] | None, now: float) -> None:
        if len(self._attempts) >= self.max_entries:
            self._attempts.clear()  # rare: every cached verdict then reads Redis once more
        self._attempts[job_id] = attempt
        if allowed is not None:
            if len(self._allowed) >= self.max_entries:
                self._evict(now)
            self._allowed[allowed] = (now + self.ttl, attempt)

    def _evict(self, now: float) -> None:
        for entry in [e for e, (until, _) in self._allowed.items() if until <= now] or list(self._allowed)[:1]:
            del self._allowed[entry]
