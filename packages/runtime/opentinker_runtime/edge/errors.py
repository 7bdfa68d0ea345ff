"""`DomainError`: the one base of every error a service answers a call with. No grpc here.

A subclass declares what the caller sees, as class attributes:

    class SessionNotFound(EnvHostError):
        code = Code.NOT_FOUND
        reason = "SESSION_NOT_FOUND"

- `code`: a canonical gRPC status code name (`Code`); the edge turns it into the status.
- `reason`: a `common.v1.ErrorReason` value name without its prefix, sent as
  `ERROR_REASON_<reason>` in the trailing metadata `opentinker-reason`; "" sends none.
- `field`: the request field at fault (e.g. "datums[3].loss_mask"); the message then starts
  with it ("datums[3].loss_mask: has 1 values for 3 tokens").
- `traceback`: a user game's traceback, when the error is a game's (sent as
  `opentinker-traceback-bin`, head and tail when long).

`code` and `reason` may also be given per raise (`reason=`), for one class used several ways.
"""

from __future__ import annotations

import enum


class Code(enum.StrEnum):
    """The canonical gRPC status code names a domain error may carry."""

    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    UNAUTHENTICATED = "UNAUTHENTICATED"


TrailingPairs = tuple[tuple[str, str | bytes], ...]


class DomainError(Exception):
    """An error a call is answered with: `code`, `reason`, `field` and a message (see the module doc)."""

    code: Code = Code.INTERNAL
    reason: str = ""
    traceback: str = ""

    def __init__(self, message: str, *, field: str = "", reason: str | None = None,
                 code: Code | None = None) -> None:
        text = f"{field}: {message}" if field else message
        super().__init__(text)
        self.message = text
        self.field = field
        if reason is not None:
            self.reason = reason
        if code is not None:
            self.code = code

    def trailing_details(self) -> TrailingPairs:
        """Trailing metadata beyond the reason (e.g. a game's traceback); none by default."""
        return ()


def clip_middle(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its head and tail around a marker."""
    if len(text) <= limit:
        return text
    marker = f"\n... ({len(text) - limit} characters cut) ...\n"
    keep = max(limit - len(marker), 0)
    return text[: keep // 2] + marker + text[len(text) - (keep - keep // 2):]


class InvalidArgument(DomainError):
    """A request field is missing, malformed or out of range."""

    code = Code.INVALID_ARGUMENT


class PermissionDenied(DomainError):
    code = Code.PERMISSION_DENIED


class Unavailable(DomainError):
    """Something the call needs cannot be reached now; a retry later may work."""

    code = Code.UNAVAILABLE


class Unimplemented(DomainError):
    code = Code.UNIMPLEMENTED


class JobTokenRefused(PermissionDenied):
    """The call may not act on the job it names: no token, another attempt's, or a token scoped
    to another job."""

    reason = "JOB_TOKEN_INVALID"


class AdminKeyRequired(PermissionDenied):
    """An RPC only OpenTinker's own services (admin keys) may call."""

    reason = "UNAUTHENTICATED"

    def __init__(self, what: str, tenant_id: str) -> None:
        super().__init__(f"{what} needs an admin key; this key belongs to tenant {tenant_id} without "
                         "admin rights")
