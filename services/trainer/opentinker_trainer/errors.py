"""Domain errors of the Trainer; the servicer maps each class to one gRPC status code."""

from __future__ import annotations


class TrainerError(Exception):
    """Base class of every error the Trainer reports to its callers."""


class ValidationError(TrainerError, ValueError):
    """A request field is malformed; `field` is its path, e.g. "datums[3].loss_mask"."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class SessionNotFoundError(TrainerError, LookupError):
    """No open session with this id (`closed_because`: why it was closed, when it was)."""

    def __init__(self, session_id: str, *, closed_because: str = "") -> None:
        self.session_id = session_id
        why = f"; it was closed because {closed_because}" if closed_because else ""
        super().__init__(f"session_id: no open session {session_id!r} on this trainer{why}")


class CheckpointNotFoundError(TrainerError, LookupError):
    """No checkpoint with this id under the checkpoint root."""


class StaleFencingError(TrainerError):
    """A call carries a fencing token lower than the highest seen for its job."""

    def __init__(self, job_id: str, token: int, highest: int) -> None:
        super().__init__(f"lease.fencing_token: {token} is stale for job {job_id!r}; this "
                         f"trainer has seen {highest} (a newer attempt owns the job)")


class NoGradientsError(TrainerError):
    """OptimStep was called with no gradients accumulated since the last step."""


class NoReferenceError(TrainerError):
    """A KL term or reference logprobs need a reference policy the session does not keep."""


class RequestIdReusedError(TrainerError):
    """A request_id was sent again with a different request."""
