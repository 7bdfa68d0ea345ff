"""Typed exceptions for gRPC status codes, so callers catch meaning, not grpc.

    try:
        scheduler.get_job("nope")
    except NotFound as error:
        print(error.code, error.reason, error.details)   # NOT_FOUND JOB_NOT_FOUND "job nope ..."

Every exception is an `OpenTinkerError`; `code` is the gRPC status code name, `reason` the
machine-readable ErrorReason the service attached ("" when none), `details` the server's message.
"""

from __future__ import annotations

import grpc

from opentinker_api.conventions import reason_from_metadata


class OpenTinkerError(Exception):
    """A call to the OpenTinker API failed; `code` is the gRPC status code name."""

    code = "UNKNOWN"

    def __init__(self, message: str, *, details: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.details = details or message
        self.reason = reason
        """The ErrorReason name without its prefix (e.g. "JOB_NOT_FOUND"), or ""."""


class Cancelled(OpenTinkerError):
    code = "CANCELLED"


class InvalidArgument(OpenTinkerError):
    code = "INVALID_ARGUMENT"


class DeadlineExceeded(OpenTinkerError):
    code = "DEADLINE_EXCEEDED"


class NotFound(OpenTinkerError):
    code = "NOT_FOUND"


class AlreadyExists(OpenTinkerError):
    code = "ALREADY_EXISTS"


class PermissionDenied(OpenTinkerError):
    code = "PERMISSION_DENIED"


class ResourceExhausted(OpenTinkerError):
    """A quota or a size limit (e.g. the tenant's max queued jobs)."""

    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(OpenTinkerError):
    code = "FAILED_PRECONDITION"


class Aborted(OpenTinkerError):
    code = "ABORTED"


class Unimplemented(OpenTinkerError):
    code = "UNIMPLEMENTED"


class Internal(OpenTinkerError):
    code = "INTERNAL"


class Unavailable(OpenTinkerError):
    """The service could not be reached (or is shutting down); retrying later may work."""

    code = "UNAVAILABLE"


class Unauthenticated(OpenTinkerError):
    code = "UNAUTHENTICATED"


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists, PermissionDenied,
    ResourceExhausted, FailedPrecondition, Aborted, Unimplemented, Internal, Unavailable, Unauthenticated,
)}


def error_for(code: str, details: str, reason: str = "") -> OpenTinkerError:
    """The typed exception for a status code name (OpenTinkerError for codes without a class)."""
    cls = _BY_CODE.get(code, OpenTinkerError)
    exception = cls(f"{code}: {details}", details=details, reason=reason.removeprefix("ERROR_REASON_"))
    exception.code = code
    return exception


def from_rpc_error(error: grpc.RpcError) -> OpenTinkerError:
    code = error.code().name if error.code() else "UNKNOWN"
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    return error_for(code, error.details() or "", reason_from_metadata(trailing))
