"""Errors of the multi-agent protocol (matches, turns, barriers); domain code, no grpc.

Each declares its status code and the ErrorReason the edge (`opentinker_runtime.edge`) puts in
the `opentinker-reason` trailing metadata (always, UNSPECIFIED included), and a message that
starts with the field or says what to do.
"""

from __future__ import annotations

from opentinker_runtime.edge.errors import Code, DomainError

ENVHOST_FIELDS = {"env_name": "environment.env_name", "config": "environment.config", "kwargs": "reset_kwargs"}
"""The EnvHost's field names in its INVALID_ARGUMENT / NOT_FOUND messages -> OpenMatch's."""
CALLERS_CODES = frozenset({"INVALID_ARGUMENT", "NOT_FOUND"})


class ProtocolError(DomainError):
    code = Code.FAILED_PRECONDITION
    reason = "UNSPECIFIED"


class InvalidProtocolRequest(ProtocolError):
    """A missing or malformed field."""

    code = Code.INVALID_ARGUMENT
    reason = "INVALID_FIELD"


class MatchNotFound(ProtocolError):
    """No match with that id on this Coordinator."""

    code = Code.NOT_FOUND
    reason = "MATCH_NOT_FOUND"


class NotYourTurn(ProtocolError):
    """An action from a seat that is not to move, or for a turn already played."""

    reason = "NOT_YOUR_TURN"


class MatchOver(ProtocolError):
    """The match finished or was aborted; no more actions."""

    reason = "MATCH_FINISHED"


class SeatTaken(ProtocolError):
    """Another agent sits in that seat."""

    reason = "SEAT_TAKEN"


class AgentLost(ProtocolError):
    """A match or barrier broke because an agent of the job left or failed."""

    code = Code.ABORTED
    reason = "AGENT_LOST"


class MatchEnvironmentFailed(ProtocolError):
    """The match's environment failed; the match is aborted. `host_code`/`host_details`: what
    the environment's host answered, when it refused a call (a status code name, "" otherwise)."""

    code = Code.UNAVAILABLE
    reason = "ENVIRONMENT_FAILED"

    def __init__(self, message: str, *, traceback: str = "", unreachable: bool = False, host_code: str = "",
                 host_details: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback
        self.unreachable = unreachable
        """The environment's host did not answer (an outage, not a broken game)."""
        self.host_code, self.host_details = host_code, host_details


class OpenRefused(ProtocolError):
    """OpenMatch failed because of the request, as the environment's host said: its code and
    reason are the caller's to act on (see `open_refusal`)."""


class BarrierOutOfOrder(ProtocolError):
    """An agent arrived at a barrier it already passed, or skipped phases backwards."""

    reason = "INVALID_FIELD"


class BarrierTimeout(ProtocolError):
    """Not every agent arrived in time."""

    code = Code.DEADLINE_EXCEEDED
    reason = "UNSPECIFIED"


def open_refusal(error: MatchEnvironmentFailed, envhost_address: str) -> OpenRefused | None:
    """What an OpenMatch caller is answered when the match's environment did not start because
    of the request: the EnvHost refused its env_name, config or reset kwargs (INVALID_ARGUMENT
    naming the caller's field), has no session left (RESOURCE_EXHAUSTED), or no EnvHost answers
    at the address the caller named (FAILED_PRECONDITION). None: a failure of the environment
    itself (the game raised, the default EnvHost is down): UNAVAILABLE as ever."""
    details = error.host_details
    if error.host_code in CALLERS_CODES:
        field, _, problem = details.partition(": ")
        return OpenRefused(f"{ENVHOST_FIELDS.get(field, 'environment')}: {problem or details}",
                           code=Code.INVALID_ARGUMENT, reason="INVALID_FIELD")
    if error.host_code == "RESOURCE_EXHAUSTED":
        return OpenRefused(f"environment: {details}", code=Code.RESOURCE_EXHAUSTED, reason="QUOTA_EXCEEDED")
    if error.host_code == "UNAVAILABLE" and envhost_address:
        return OpenRefused(f"environment.envhost_address: no EnvHost answers at {envhost_address!r} "
                           f"({details[:200]})", code=Code.FAILED_PRECONDITION, reason="ENVIRONMENT_FAILED")
    return None
