"""Domain errors of the EnvHost (no grpc here): each declares the status code and ErrorReason its
callers see (`opentinker_runtime.edge`). Failed unary calls also carry the kind of a game's
failure (`env_error_kind`) in `opentinker-env-error-kind`, and the game's traceback."""

from __future__ import annotations

from opentinker_runtime.edge.errors import Code, DomainError, TrailingPairs

ENV_ERROR_KIND_METADATA_KEY = "opentinker-env-error-kind"
"""Trailing metadata of a failed game call: `env_error_kind` (failed, timeout, crashed,
memory_limit, cpu_limit), for callers that count environment failures by kind."""


def utf8_safe(text: str) -> str:
    """`text` with anything UTF-8 cannot encode (lone surrogates) as backslash escapes, so a
    game's message can always travel in a status, metadata or ErrorDetail."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class EnvHostError(DomainError):
    """Base of the EnvHost's domain errors (its ErrorReason, UNSPECIFIED unless a class says more,
    is always sent); `traceback` holds a game's traceback, if any."""

    code = Code.INTERNAL
    reason = "UNSPECIFIED"

    def __init__(self, message: str, *, traceback: str = "") -> None:
        super().__init__(utf8_safe(message))
        self.traceback = utf8_safe(traceback)

    def trailing_details(self) -> TrailingPairs:
        kind = env_error_kind(self)
        return ((ENV_ERROR_KIND_METADATA_KEY, kind),) if kind else ()


class UnknownEnvironment(EnvHostError):
    code = Code.NOT_FOUND


class SessionNotFound(EnvHostError):
    code = Code.NOT_FOUND
    reason = "SESSION_NOT_FOUND"


class InvalidArgument(EnvHostError):
    """Bad config, reset kwargs, seat or a missing field; the message starts with the field."""

    code = Code.INVALID_ARGUMENT
    reason = "INVALID_FIELD"


class RequestIdReused(EnvHostError):
    code = Code.INVALID_ARGUMENT
    reason = "REQUEST_ID_REUSED"


class SessionLimitReached(EnvHostError):
    code = Code.RESOURCE_EXHAUSTED
    reason = "QUOTA_EXCEEDED"


class WrongSessionState(EnvHostError):
    """Step before reset, step after done, or a session broken by a timeout."""

    code = Code.FAILED_PRECONDITION


class NotYourTurnError(EnvHostError):
    """A seated step from the seat that is not to move; the episode goes on."""

    code = Code.FAILED_PRECONDITION
    reason = "NOT_YOUR_TURN"


class EnvironmentFailure(EnvHostError):
    """The game raised or returned something invalid; fails this session's call only."""

    code = Code.INTERNAL
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

    code = Code.DEADLINE_EXCEEDED
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
