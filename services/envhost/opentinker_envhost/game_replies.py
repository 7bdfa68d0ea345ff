"""What a game process's reply means for its session: the domain error of an error reply, and
the errors of replies and results the process should never have sent (`sandbox_protocol`)."""

from __future__ import annotations

from typing import Any

from opentinker_envhost.errors import (
    EnvHostError,
    EnvironmentCrashed,
    EnvironmentFailure,
    InvalidArgument,
    NotYourTurnError,
)

ERROR_FIELDS = ("kind", "raised", "message", "traceback")


def reply_error(reply: Any, what: str, *, invalid: bool) -> EnvHostError | None:
    """The error an error reply stands for: NotYourTurnError, InvalidArgument (a GameConfigError
    where `invalid` applies: a constructor or reset) or EnvironmentFailure; None when the reply
    is malformed (its process broke the protocol)."""
    error = reply.get("error") if isinstance(reply, dict) else None
    if not isinstance(error, dict) or not all(isinstance(error.get(k), str) for k in ERROR_FIELDS):
        return None
    if error["kind"] == "not_your_turn":
        return NotYourTurnError(error["message"])
    if error["kind"] == "config" and invalid:
        return InvalidArgument(error["message"])
    return EnvironmentFailure(f"{what} raised {error['raised']}", traceback=error["traceback"])


def invalid_reply(what: str, reply: Any) -> EnvironmentCrashed:
    return EnvironmentCrashed(f"{what} failed: the game's process sent an invalid reply: {str(reply)[:200]!r}")


def invalid_result(what: str, error: Exception) -> EnvironmentCrashed:
    return EnvironmentCrashed(f"{what} failed: the game's process sent an invalid result: {error}")
