"""The job-token check of a job-scoped RPC, one line in a servicer of any service:

    await require_job_token(context, job_id=request.lease.job_id,
                            fencing_token=request.lease.fencing_token)   # a call with a lease
    await require_job_token(context, job_id=session.job_id, field="session_id")  # on a job's session

The call must carry `x-opentinker-job-token` with the current attempt's token of `job_id` (and,
when it has a lease, one of that attempt's fencing tokens); otherwise it is aborted with
PERMISSION_DENIED and the reason ERROR_REASON_JOB_TOKEN_INVALID in `opentinker-reason`. Nothing is
checked when `job_id` is empty (not job-scoped: the admin-key rule alone applies), for a job the
Scheduler does not know, or when auth is disabled (no AuthInterceptor, so no verifier). Redis
down: UNAVAILABLE. The token itself never reaches a log or a status message.

A call whose only credential is a job's token (an EnvHost's callers: `Principal.job_id`) may act
on that job alone: any other job id, or none, is PERMISSION_DENIED.

A stream that answers refusals as items instead of ending (EnvHost's Interact) calls
`job_token_refusal` and turns the refusal into its ErrorDetail.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import structlog

from opentinker_api.common.v1 import errors_pb2
from opentinker_runtime.auth.interceptor import current_job_tokens, current_principal
from opentinker_runtime.core.errors import REASON_METADATA_KEY
from opentinker_runtime.auth.job_tokens import JOB_TOKEN_METADATA_KEY, presented_job_token
from opentinker_runtime.core.redis_store import REDIS_DOWN_ERRORS

log = structlog.get_logger(__name__)
REASON = errors_pb2.ErrorReason.Name(errors_pb2.ERROR_REASON_JOB_TOKEN_INVALID)


@dataclass(frozen=True, kw_only=True)
class JobTokenRefusal:
    """Why a call may not act on a job, as a gRPC status (and `reason`, an ErrorReason name)."""

    code: grpc.StatusCode
    message: str
    reason: str = ""


async def require_job_token(context: grpc.aio.ServicerContext, *, job_id: str, fencing_token: int | None = None,
                            field: str = "lease.job_id") -> None:
    """Return when the call may act on `job_id`; abort the RPC otherwise (see the module doc).
    `field` names where `job_id` came from, for a malformed id's INVALID_ARGUMENT."""
    refusal = await job_token_refusal(context, job_id=job_id, fencing_token=fencing_token, field=field)
    if refusal is not None:
        metadata = ((REASON_METADATA_KEY, refusal.reason),) if refusal.reason else ()
        await context.abort(refusal.code, refusal.message, trailing_metadata=metadata)


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
    return verifier.allowed_cached(job_id, presented_job_token(context.invocation_metadata() or ()))


async def job_token_refusal(context: grpc.aio.ServicerContext, *, job_id: str, fencing_token: int | None = None,
                            field: str = "lease.job_id") -> JobTokenRefusal | None:
    """None when the call may act on `job_id`; else why not."""
    principal = current_principal()
    if principal.job_id:  # the call's only credential is a job's token: that job's things alone
        if job_id == principal.job_id:
            return None
        return JobTokenRefusal(code=grpc.StatusCode.PERMISSION_DENIED, reason=REASON,
                               message=f"{field}: the job token this call carries acts only on its own job's "
                                       "sessions")
    verifier = current_job_tokens()
    if verifier is None or not job_id:
        return None
    token = presented_job_token(context.invocation_metadata() or ())
    try:
        verdict = await verifier.verify(job_id, token, fencing_token)
    except ValueError:
        return JobTokenRefusal(code=grpc.StatusCode.INVALID_ARGUMENT,
                               message=f"{field}: must be a job id without whitespace, got {job_id!r}")
    except REDIS_DOWN_ERRORS as error:
        log.warning("job_token_store_unavailable", job_id=job_id, error=str(error))
        return JobTokenRefusal(code=grpc.StatusCode.UNAVAILABLE, message="cannot verify the job token: the job "
                                                                         "store (Redis) is unavailable; retry later")
    if verdict.allowed:
        return None
    log.info("job_token_refused", job_id=job_id, fencing_token=fencing_token, presented=bool(token),
             problem=verdict.problem)
    return JobTokenRefusal(code=grpc.StatusCode.PERMISSION_DENIED, reason=REASON,
                           message=f"metadata {JOB_TOKEN_METADATA_KEY}: {verdict.problem}; calls for job "
                                   f"{job_id} need the job token the Scheduler issued to its current attempt")
