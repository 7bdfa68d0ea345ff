"""Domain errors of the Trainer: each class declares the status code and ErrorReason its callers
see (`opentinker_runtime.edge`). A stale fencing token is the edge's `StaleFencingToken`."""

from __future__ import annotations

from opentinker_runtime.edge.errors import Code, DomainError


class TrainerError(DomainError):
    """Base class of every error the Trainer reports to its callers (INTERNAL unless a subclass
    says otherwise)."""

    code = Code.INTERNAL


class ValidationError(TrainerError, ValueError):
    """A request field is malformed; `field` is its path, e.g. "datums[3].loss_mask"."""

    code = Code.INVALID_ARGUMENT
    reason = "INVALID_FIELD"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)


class SessionNotFoundError(TrainerError, LookupError):
    """No open session with this id (`closed_because`: why it was closed, when it was)."""

    code = Code.NOT_FOUND
    reason = "SESSION_NOT_FOUND"

    def __init__(self, session_id: str, *, closed_because: str = "") -> None:
        self.session_id = session_id
        why = f"; it was closed because {closed_because}" if closed_because else ""
        super().__init__(f"no open session {session_id!r} on this trainer{why}", field="session_id")


class CheckpointNotFoundError(TrainerError, LookupError):
    """No checkpoint with this id under the checkpoint root."""

    code = Code.NOT_FOUND


class NoGradientsError(TrainerError):
    """OptimStep was called with no gradients accumulated since the last step."""

    code = Code.FAILED_PRECONDITION


class NoReferenceError(TrainerError):
    """A KL term or reference logprobs need a reference policy the session does not keep."""

    code = Code.FAILED_PRECONDITION


class RequestIdReusedError(TrainerError):
    """A request_id was sent again with a different request."""

    code = Code.INVALID_ARGUMENT
    reason = "REQUEST_ID_REUSED"


class PeerRefusedError(TrainerError):
    """Another Trainer of a data-parallel session's lease did not start its ranks (its
    StartReplicas answer): UNAVAILABLE when it could not be reached (a retry may work), else
    FAILED_PRECONDITION with its message."""

    code = Code.FAILED_PRECONDITION

    def __init__(self, address: str, code: str, details: str) -> None:
        super().__init__(f"trainer {address} did not start its data-parallel ranks: {code}: {details}",
                         field="peers", code=Code.UNAVAILABLE if code == "UNAVAILABLE" else None)
