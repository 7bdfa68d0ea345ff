"""Domain errors of the scheduler: each class declares the status code and ErrorReason its callers
see (`opentinker_runtime.edge`).

`reason` is an `opentinker.common.v1.ErrorReason` value name without its prefix; a raise may give
another (`reason=`), or "" for none: the Scheduler sends no `opentinker-reason` then.
A Redis outage reaches callers as StoreUnavailable (`store_outage`): UNAVAILABLE, retryable.
"""

from __future__ import annotations

from opentinker_runtime.core.redis_store import RedisPoolExhausted
from opentinker_runtime.edge.errors import Code, DomainError

REDIS_DOWN_MESSAGE = "the scheduler's state store (Redis) is unavailable; retry later"


class SchedulerError(DomainError):
    """Base class; `reason` tells a client what happened in a machine-readable way."""

    code = Code.INTERNAL


class InvalidArgument(SchedulerError):
    """A request field is missing, malformed or out of range; `field` is its path."""

    code = Code.INVALID_ARGUMENT
    reason = "INVALID_FIELD"

    def __init__(self, field: str, problem: str, *, reason: str | None = None) -> None:
        super().__init__(problem, field=field, reason=reason)


class NotFound(SchedulerError):
    code = Code.NOT_FOUND
    reason = "JOB_NOT_FOUND"


class FailedPrecondition(SchedulerError):
    """The request is valid but the resource's state does not allow it."""

    code = Code.FAILED_PRECONDITION
    reason = "JOB_NOT_CANCELLABLE"


class PermissionDenied(SchedulerError):
    """The caller is authenticated, but its key may not do this (e.g. a tenant key calling an
    admin-only RPC)."""

    code = Code.PERMISSION_DENIED
    reason = "UNAUTHENTICATED"


class QuotaExceeded(SchedulerError):
    """The caller's tenant is at one of its quota limits."""

    code = Code.RESOURCE_EXHAUSTED
    reason = "QUOTA_EXCEEDED"


class OutOfRange(SchedulerError):
    """A position (e.g. an event sequence) outside what is kept."""

    code = Code.OUT_OF_RANGE
    reason = "INVALID_FIELD"


class StaleLease(FailedPrecondition):
    """The LeaseContext is not a current lease of the job (expired, released or superseded)."""

    reason = "STALE_FENCING_TOKEN"


class StoreUnavailable(SchedulerError):
    """The state store (Redis) cannot serve the call now; a retry later may work."""

    code = Code.UNAVAILABLE


def store_outage(error: BaseException) -> StoreUnavailable:
    """A Redis error as callers see it: down, or (a full connection pool) this scheduler is busy."""
    if isinstance(error, RedisPoolExhausted):
        return StoreUnavailable(
            f"the scheduler is busy: all {error.max_connections} of its connections to the state store "
            f"(Redis) stayed in use for {error.wait_seconds} s; Redis itself is fine, retry shortly")
    return StoreUnavailable(REDIS_DOWN_MESSAGE)
