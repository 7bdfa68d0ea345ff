"""Domain errors of the EnvHost (no grpc here): each names a kind (a canonical status code
name) and a reason (an `ErrorReason` name without its prefix) the servicer maps onto the wire."""

from __future__ import annotations

import enum
from typing import ClassVar


def utf8_safe(text: str) -> str:
    """`text` with anything UTF-8 cannot encode (lone surrogates) as backslash escapes, so a
    game's message can always travel in a status, metadata or ErrorDetail."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def clip_middle(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its head and tail around a marker."""
    if len(text) <= limit:
        return text
    marker = f"\n... ({len(text) - limit} characters cut) ...\n"
    keep = max(limit - len(marker), 0)
    return text[: keep // 2] + marker + text[len(text) - (keep - keep // 2):]


class ErrorKind(enum.StrEnum):
    """Canonical gRPC status code names this service answers with."""

    NOT_FOUND = "NOT_FOUND"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    INTERNAL = "INTERNAL"


class EnvHostError(Exception):
    """Base of the EnvHost's domain errors; `traceback` holds a game's traceback, if any."""

    kind: ClassVar[ErrorKind] = ErrorKind.INTERNAL
    reason: ClassVar[str] = "UNSPECIFIED"

    def __init__(self, message: str, *, traceback: str = "") -> None:
        message, traceback = utf8_safe(message), utf8_safe(traceback)
        super().__init__(message)
        self.message = message
        self.traceback = traceback


class UnknownEnvironment(EnvHostError):
    kind = ErrorKind.NOT_FOUND


class SessionNotFound(EnvHostError):
    kind = ErrorKind.NOT_FOUND
    reason = "SESSION_NOT_FOUND"


class InvalidArgument(EnvHostError):
    """Bad config, reset kwargs, seat or a missing field; the message starts with the field."""

    kind = ErrorKind.INVALID_ARGUMENT
    reason = "INVALID_FIELD"


class RequestIdReused(EnvHostError):
    kind = ErrorKind.INVALID_ARGUMENT
    reason = "REQUEST_ID_REUSED"


class SessionLimitReached(EnvHostError):
    kind = ErrorKind.RESOURCE_EXHAUSTED
    reason = "QUOTA_EXCEEDED"


class WrongSessionState(EnvHostError):
    """Step before reset, step after done, or a session broken by a timeout."""

    kind = ErrorKind.FAILED_PRECONDITION


class NotYourTurnError(EnvHostError):
    """A seated step from the seat that is not to move; the episode goes on."""

    kind = ErrorKind.FAILED_PRECONDITION
    reason = "NOT_YOUR_TURN"


class EnvironmentFailure(EnvHostError):
    """The game raised or returned something invalid; fails this session's call only."""

    kind = ErrorKind.INTERNAL
    reason = "ENVIRONMENT_FAILED"


class EnvironmentCrashed(EnvironmentFailure):
    """The game's sandbox process died or broke the protocol; the session cannot go on.

    `metric_kind` labels opentinker_envhost_env_errors_total: memory_limit, cpu_limit or crashed.
    """

    def __init__(self, message: str, *, metric_kind: str = "crashed", traceback: str = "") -> None:
        super().__init__(message, traceback=traceback)
        self.metric_kind = metric_kind


class EnvironmentTimeout(EnvHostError):
    """A game call ran past the per-call timeout."""

    kind = ErrorKind.DEADLINE_EXCEEDED
    reason = "ENVIRONMENT_TIMEOUT"


def env_error_kind(error: BaseException) -> str | None:
    """How a game failed, for metrics and callers that count failures by kind: failed (it
    raised or answered something invalid), timeout, crashed, memory_limit, cpu_limit; None
    for errors that are not the game's."""
    if isinstance(error, EnvironmentCrashed):
        return error.metric_kind
    if isinstance(error, EnvironmentFailure):
        return "failed"
    if isinstance(error, EnvironmentTimeout):
        return "timeout"
    return None
