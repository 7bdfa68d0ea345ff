"""An API call that failed, and the HTTP status that stands for its gRPC code.

The mapping follows grpc-gateway's (the common convention for gRPC behind HTTP/JSON); a code
not listed (UNKNOWN, INTERNAL, DATA_LOSS) is 500.
"""

from __future__ import annotations

HTTP_STATUS_BY_GRPC_CODE: dict[str, int] = {
    "INVALID_ARGUMENT": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "ABORTED": 409,
    "FAILED_PRECONDITION": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
INTERNAL_SERVER_ERROR = 500


class ApiError(Exception):
    """A failed call: `code` is a gRPC status code name, `message` what the server said."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS_BY_GRPC_CODE.get(self.code, INTERNAL_SERVER_ERROR)

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def bad_request(message: str) -> ApiError:
    """A request the dashboard itself rejects before calling the Scheduler."""
    return ApiError("INVALID_ARGUMENT", message)


def not_found(message: str) -> ApiError:
    return ApiError("NOT_FOUND", message)


def forbidden(message: str) -> ApiError:
    return ApiError("PERMISSION_DENIED", message)
