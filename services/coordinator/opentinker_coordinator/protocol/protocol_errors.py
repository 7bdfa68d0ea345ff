"""Errors of the multi-agent protocol (matches, turns, barriers); domain code, no grpc.

Each carries the ErrorReason name the servicer puts in the `opentinker-reason` trailing
metadata and a message that starts with the field or says what to do.
"""

from __future__ import annotations


class ProtocolError(Exception):
    reason = "UNSPECIFIED"


class InvalidProtocolRequest(ProtocolError):
    """A missing or malformed field (INVALID_ARGUMENT)."""

    reason = "INVALID_FIELD"


class MatchNotFound(ProtocolError):
    """No match with that id on this Coordinator (NOT_FOUND)."""

    reason = "MATCH_NOT_FOUND"


class NotYourTurn(ProtocolError):
    """An action from a seat that is not to move, or for a turn already played (FAILED_PRECONDITION)."""

    reason = "NOT_YOUR_TURN"


class MatchOver(ProtocolError):
    """The match finished or was aborted; no more actions (FAILED_PRECONDITION)."""

    reason = "MATCH_FINISHED"


class SeatTaken(ProtocolError):
    """Another agent sits in that seat (FAILED_PRECONDITION)."""

    reason = "SEAT_TAKEN"


class AgentLost(ProtocolError):
    """A match or barrier broke because an agent of the job left or failed (ABORTED)."""

    reason = "AGENT_LOST"


class MatchEnvironmentFailed(ProtocolError):
    """The match's environment failed (UNAVAILABLE); the match is aborted."""

    reason = "ENVIRONMENT_FAILED"

    def __init__(self, message: str, *, traceback: str = "", unreachable: bool = False) -> None:
        super().__init__(message)
        self.traceback = traceback
        self.unreachable = unreachable
        """The environment's host did not answer (an outage, not a broken game)."""


class BarrierOutOfOrder(ProtocolError):
    """An agent arrived at a barrier it already passed, or skipped phases backwards (FAILED_PRECONDITION)."""

    reason = "INVALID_FIELD"


class BarrierTimeout(ProtocolError):
    """Not every agent arrived in time (DEADLINE_EXCEEDED)."""

    reason = "UNSPECIFIED"
