"""Typed exceptions for gRPC status codes, so callers catch meaning, not grpc."""

from __future__ import annotations

import grpc


class OpenTinkerError(Exception):
    """A call to the OpenTinker API failed; `code` is the gRPC status code name."""

    code = "UNKNOWN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(OpenTinkerError):
    code = "INVALID_ARGUMENT"


class NotFound(OpenTinkerError):
    code = "NOT_FOUND"


class AlreadyExists(OpenTinkerError):
    code = "ALREADY_EXISTS"


class FailedPrecondition(OpenTinkerError):
    code = "FAILED_PRECONDITION"


class Unauthenticated(OpenTinkerError):
    code = "UNAUTHENTICATED"


class Unavailable(OpenTinkerError):
    code = "UNAVAILABLE"


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, NotFound, AlreadyExists, FailedPrecondition,
                                      Unauthenticated, Unavailable)}


def from_rpc_error(error: grpc.RpcError) -> OpenTinkerError:
    code = error.code().name if error.code() else "UNKNOWN"
    cls = _BY_CODE.get(code, OpenTinkerError)
    exception = cls(f"{code}: {error.details()}")
    exception.code = code
    return exception
