"""Domain errors of the scheduler. `grpc_errors.py` maps each class to one gRPC status code.

`reason` is an `opentinker.common.v1.ErrorReason` value name without its prefix.
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Base class; `reason` tells a client what happened in a machine-readable way."""

    reason: str = "UNSPECIFIED"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or type(self).reason


class InvalidArgument(SchedulerError):
    """A request field is missing, malformed or out of range; `field` is its path."""

    reason = "INVALID_FIELD"

    def __init__(self, field: str, problem: str, *, reason: str | None = None) -> None:
        super().__init__(f"{field}: {problem}", reason=reason)
        self.field = field


class NotFound(SchedulerError):
    reason = "JOB_NOT_FOUND"


class FailedPrecondition(SchedulerError):
    """The request is valid but the resource's state does not allow it."""

    reason = "JOB_NOT_CANCELLABLE"


class PermissionDenied(SchedulerError):
    """The caller is authenticated, but its key may not do this (e.g. a tenant key calling an
    admin-only RPC)."""

    reason = "UNAUTHENTICATED"


class QuotaExceeded(SchedulerError):
    """The caller's tenant is at one of its quota limits."""

    reason = "QUOTA_EXCEEDED"


class OutOfRange(SchedulerError):
    """A position (e.g. an event sequence) outside what is kept."""

    reason = "INVALID_FIELD"


class StaleLease(FailedPrecondition):
    """The LeaseContext is not a current lease of the job (expired, released or superseded)."""

    reason = "STALE_FENCING_TOKEN"
