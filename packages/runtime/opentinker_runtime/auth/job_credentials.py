"""A job's token as the only credential of a call: how an EnvHost knows which job calls it.

The services never send their own (admin) key to an EnvHost a job names: an EnvHost may be served
by a tenant, at an address the tenant chose. A job's calls to an EnvHost carry its token and its
id (`x-opentinker-job-token`, `x-opentinker-job-id`) instead; the EnvHost's AuthInterceptor turns
a valid pair into a Principal of the job's tenant scoped to that job (`Principal.job_id`), which
may act on that job's sessions only (`opentinker_runtime.edge.job_token`).

Who checks the pair: the stack's own EnvHost reads the job's record in Redis
(`JobTokenVerifier.tenant_of`); an EnvHost a tenant serves itself has no Redis and asks the
Scheduler (`SchedulerJobCredentials`: CheckJobToken with the tenant's own key, which answers for
that tenant's jobs only). Positive answers are cached for a few seconds either way.
"""

from __future__ import annotations

import hashlib
import time
from typing import Protocol

import grpc

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as scheduler_grpc

REFUSED = frozenset({grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT})
CHECK_TIMEOUT_S = 10.0


class JobCredentialsUnavailable(ConnectionError):
    """Whoever checks job tokens cannot be reached; the call is answered UNAVAILABLE."""


class JobCredentials(Protocol):
    async def tenant_of(self, job_id: str, token: str) -> str | None:
        """The job's tenant when `token` is its running attempt's token; None otherwise."""


class TenantCache:
    """Positive answers for `ttl_seconds`, by (job id, token hash); bounded."""

    def __init__(self, ttl_seconds: float, max_entries: int = 10_000) -> None:
        self.ttl, self.max_entries = ttl_seconds, max_entries
        self._entries: dict[tuple[str, str], tuple[float, str]] = {}

    @staticmethod
    def key(job_id: str, token: str) -> tuple[str, str]:
        return job_id, hashlib.sha256(token.encode()).hexdigest()

    def get(self, job_id: str, token: str) -> str | None:
        until, tenant = self._entries.get(self.key(job_id, token), (0.0, ""))
        return tenant if until > time.monotonic() else None

    def put(self, job_id: str, token: str, tenant: str) -> None:
        if len(self._entries) >= self.max_entries:
            self._entries.clear()  # rare: the next calls check once more
        self._entries[self.key(job_id, token)] = (time.monotonic() + self.ttl, tenant)


class RedisJobCredentials:
    """The stack's own EnvHost: job records in Redis, through the server's JobTokenVerifier."""

    def __init__(self, verifier, *, ttl_seconds: float = 5.0) -> None:  # noqa: ANN001 - JobTokenVerifier
        self.verifier = verifier
        self.cache = TenantCache(ttl_seconds)

    async def tenant_of(self, job_id: str, token: str) -> str | None:
        if (tenant := self.cache.get(job_id, token)) is not None:
            return tenant
        tenant = await self.verifier.tenant_of(job_id, token)
        if tenant is not None:
            self.cache.put(job_id, token, tenant)
        return tenant


class SchedulerJobCredentials:
    """An EnvHost a tenant serves itself: asks the Scheduler (CheckJobToken) with the tenant's key,
    so only that tenant's running jobs get in."""

    def __init__(self, scheduler_address: str, api_key: str, *, ttl_seconds: float = 5.0) -> None:
        from opentinker_runtime.auth.channels import authenticated_channel

        self.channel = authenticated_channel(scheduler_address, api_key)
        self.stub = scheduler_grpc.SchedulerServiceStub(self.channel)
        self.cache = TenantCache(ttl_seconds)

    async def tenant_of(self, job_id: str, token: str) -> str | None:
        if (tenant := self.cache.get(job_id, token)) is not None:
            return tenant
        try:
            answer = await self.stub.CheckJobToken(scheduler_pb.CheckJobTokenRequest(job_id=job_id, job_token=token),
                                                   timeout=CHECK_TIMEOUT_S)
        except grpc.aio.AioRpcError as error:
            if error.code() in REFUSED:
                return None
            raise JobCredentialsUnavailable(f"cannot check the job token with the Scheduler: {error.code().name} "
                                            f"{error.details()}") from error
        self.cache.put(job_id, token, answer.tenant_id)
        return answer.tenant_id

    async def close(self) -> None:
        await self.channel.close()
