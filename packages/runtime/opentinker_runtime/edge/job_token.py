"""Which job a call acts on, declared per RPC, and the check of the job token it must carry.

    @job_token(lease="lease", owner="session_id")           # a Trainer call on a job's session
    @job_token(lease="target.lease", owner="target.policy_id")  # a client stream: its first message
    @job_token(job_id="job_id")                              # EnvHost OpenSession, Coordinator OpenMatch
    @job_token(lease="lease", admin_only="FinishJob (the Coordinator's call)")

The servicer base (`handlers`) runs the check before the method. The job is the lease's, when
the lease names one (checked with its fencing token too); else the one `job_id` names; else the
job that owns the id `owner` names, which the servicer answers in `job_of_owner(value)` ("" when
the id is empty; it may raise the call's DomainError, e.g. NOT_FOUND for an unknown session).
`admin_only`: a non-admin key is refused first, so a refusal never hints that a job exists.

The call must carry `x-opentinker-job-token` with the current attempt's token of that job (and,
with a lease, one of that attempt's fencing tokens); otherwise it is refused with
PERMISSION_DENIED and the reason ERROR_REASON_JOB_TOKEN_INVALID. Nothing is checked when the job
id is empty (not job-scoped: the admin-key rule alone applies), for a job the Scheduler does not
know, or when auth is disabled (no verifier). Redis down: UNAVAILABLE. The token itself never
reaches a log or a status message.

A call whose only credential is a job's token (an EnvHost's callers: `Principal.job_id`) may act
on that job alone: any other job id, or none, is PERMISSION_DENIED.

A stream that answers refusals as items instead of ending (EnvHost's Interact) calls
`job_token_refusal` per request and sends the refusal as its ErrorDetail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
import structlog

from opentinker_runtime.auth.interceptor import current_job_tokens, current_principal
from opentinker_runtime.auth.job_tokens import JOB_TOKEN_METADATA_KEY, presented_job_token
from opentinker_runtime.core.redis_store import REDIS_DOWN_ERRORS
from opentinker_runtime.edge.errors import AdminKeyRequired, DomainError, InvalidArgument, JobTokenRefused, Unavailable

log = structlog.get_logger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, kw_only=True)
class JobScope:
    """Where a request names its job (paths of fields, dotted: "target.lease")."""

    lease: str = ""
    job_id: str = ""
    owner: str = ""
    admin_only: str = ""
    """The RPC's name in the refusal of a non-admin key; "" = any key the server accepts."""


class OwnsJobs(Protocol):
    def job_of_owner(self, value: str) -> str: ...


def job_token(scope: JobScope | None = None, *, lease: str = "", job_id: str = "", owner: str = "",
              admin_only: str = "") -> Callable[[F], F]:
    """Declare an RPC job-scoped (see the module doc): by its fields, or by a `scope` the servicer
    also uses itself (a stream checking each request)."""
    scope = scope or JobScope(lease=lease, job_id=job_id, owner=owner, admin_only=admin_only)

    def declare(method: F) -> F:
        method.job_scope = scope  # type: ignore[attr-defined] - read by handlers.servicer_base
        return method
    return declare


def scope_of(method: Callable[..., Any]) -> JobScope | None:
    return getattr(method, "job_scope", None)


async def check_scope(scope: JobScope, request: Any, servicer: OwnsJobs, context: grpc.aio.ServicerContext) -> None:
    """Return when the call may act on the job `request` names; raise the refusal otherwise."""
    if scope.admin_only and not current_principal().admin:
        raise AdminKeyRequired(scope.admin_only, current_principal().tenant_id)
    job_id, fencing_token, field = scoped_job(scope, request, servicer)
    if field:
        refusal = await job_token_refusal(context, job_id=job_id, fencing_token=fencing_token, field=field)
        if refusal is not None:
            raise refusal


def scoped_job(scope: JobScope, request: Any, servicer: OwnsJobs) -> tuple[str, int | None, str]:
    """(job id, fencing token or None, the field it came from); field "" = nothing to check."""
    lease = field_at(request, scope.lease) if scope.lease else None
    if lease is not None and lease.job_id:
        return lease.job_id, lease.fencing_token, f"{scope.lease}.job_id"
    if scope.job_id:
        return field_at(request, scope.job_id), None, scope.job_id
    if scope.owner:
        value = field_at(request, scope.owner)
        return (servicer.job_of_owner(value) if value else ""), None, scope.owner
    return "", None, ""


def field_at(message: Any, path: str) -> Any:
    for name in path.split("."):
        message = getattr(message, name)
    return message


def presented_token(context: grpc.aio.ServicerContext) -> str:
    """The job token the call carries ("" when none): what a worker forwards on the job's calls."""
    return presented_job_token(context.invocation_metadata() or ())


def job_token_check_needed() -> bool:
    """Whether `job_token_refusal` may refuse anything in the RPC being handled (False when auth
    is disabled: callers on a hot path skip the call)."""
    return bool(current_principal().job_id) or current_job_tokens() is not None


def job_token_allowed_now(context: grpc.aio.ServicerContext, *, job_id: str) -> bool:
    """True when `job_token_refusal` would let the call act on `job_id` without any I/O: the
    call's job token is that job's own, or no check applies, or the verifier holds a verdict
    for its token. False is no refusal: await `job_token_refusal` to decide."""
    principal = current_principal()
    if principal.job_id:
        return job_id == principal.job_id
    verifier = current_job_tokens()
    if verifier is None or not job_id:
        return True
    return verifier.allowed_cached(job_id, presented_token(context))


async def job_token_refusal(context: grpc.aio.ServicerContext, *, job_id: str, fencing_token: int | None = None,
                            field: str = "lease.job_id") -> DomainError | None:
    """None when the call may act on `job_id`; else the refusal. `field` names where `job_id`
    came from, for a malformed id's INVALID_ARGUMENT."""
    principal = current_principal()
    if principal.job_id:  # the call's only credential is a job's token: that job's things alone
        if job_id == principal.job_id:
            return None
        return JobTokenRefused(f"{field}: the job token this call carries acts only on its own job's sessions")
    verifier = current_job_tokens()
    if verifier is None or not job_id:
        return None
    token = presented_token(context)
    try:
        verdict = await verifier.verify(job_id, token, fencing_token)
    except ValueError:
        return InvalidArgument(f"must be a job id without whitespace, got {job_id!r}", field=field)
    except REDIS_DOWN_ERRORS as error:
        log.warning("job_token_store_unavailable", job_id=job_id, error=str(error))
        return Unavailable("cannot verify the job token: the job store (Redis) is unavailable; retry later")
    if verdict.allowed:
        return None
    log.info("job_token_refused", job_id=job_id, fencing_token=fencing_token, presented=bool(token),
             problem=verdict.problem)
    return JobTokenRefused(f"metadata {JOB_TOKEN_METADATA_KEY}: {verdict.problem}; calls for job {job_id} need "
                           "the job token the Scheduler issued to its current attempt")
