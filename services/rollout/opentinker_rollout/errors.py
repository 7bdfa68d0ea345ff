"""Domain errors of the Rollout service: each class declares the status code and ErrorReason its
callers see (`opentinker_runtime.edge`); a stale fencing token is the edge's StaleFencingToken.
"""

from __future__ import annotations

from opentinker_runtime.edge.errors import Code, DomainError


class RolloutError(DomainError):
    """Base class; its ErrorReason (UNSPECIFIED unless a class or raise says more) is always sent."""

    code = Code.FAILED_PRECONDITION
    reason = "UNSPECIFIED"


class InvalidArgument(RolloutError):
    """A request field is missing, malformed or out of range; the message starts with its path."""

    code = Code.INVALID_ARGUMENT
    reason = "INVALID_FIELD"

    def __init__(self, field: str, problem: str, *, reason: str | None = None) -> None:
        super().__init__(problem, field=field, reason=reason)


class NotFound(RolloutError):
    """No policy with this id is loaded here."""

    code = Code.NOT_FOUND


class FailedPrecondition(RolloutError):
    """The request is valid but the policy's state does not allow it."""

    code = Code.FAILED_PRECONDITION


class WeightsVersionConflict(FailedPrecondition):
    """UpdateWeights carries a policy version the policy already has (or an older one)."""

    reason = "WEIGHTS_VERSION_CONFLICT"


class WeightsCorrupt(InvalidArgument):
    """The weight transfer does not match its header (sizes, names, shapes or checksum)."""

    def __init__(self, problem: str, *, field: str = "chunk") -> None:
        super().__init__(field, problem, reason="WEIGHTS_CORRUPT")
