"""What resolving a JobSpec raises: the first problem found, naming its field path."""

from __future__ import annotations


class ResolveError(ValueError):
    """`field` is the JobSpec path (`spec.training.batch_size`); the Scheduler answers it as
    INVALID_ARGUMENT naming the field, a Coordinator fails the run with it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message
