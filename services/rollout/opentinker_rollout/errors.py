"""Domain errors of the Rollout service; the servicer maps each class to one gRPC status code.

`reason` is an `opentinker.common.v1.ErrorReason` value name without its prefix.
"""

from __future__ import annotations


class RolloutError(Exception):
    """Base class; `reason` tells a client what happened in a machine-readable way."""

    reason: str = "UNSPECIFIED"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or type(self).reason


class InvalidArgument(RolloutError):
    """A request field is missing, malformed or out of range; the message starts with its path."""

    reason = "INVALID_FIELD"

    def __init__(self, field: str, problem: str, *, reason: str | None = None) -> None:
        super().__init__(f"{field}: {problem}", reason=reason)
        self.field = field


class NotFound(RolloutError):
    """No policy with this id is loaded here."""


class FailedPrecondition(RolloutError):
    """The request is valid but the policy's state does not allow it."""


class StaleFencingToken(FailedPrecondition):
    """A lease's fencing token is lower than the highest this worker has seen for the job."""

    reason = "STALE_FENCING_TOKEN"


class WeightsVersionConflict(FailedPrecondition):
    """UpdateWeights carries a policy version the policy already has (or an older one)."""

    reason = "WEIGHTS_VERSION_CONFLICT"


class WeightsCorrupt(InvalidArgument):
    """The weight transfer does not match its header (sizes, names, shapes or checksum)."""

    def __init__(self, problem: str, *, field: str = "chunk") -> None:
        super().__init__(field, problem, reason="WEIGHTS_CORRUPT")
