"""Errors raised by `opentinker_runtime.ml`; each names what is wrong and how to fix it."""

from __future__ import annotations


class MLError(Exception):
    """Base class for errors raised by `opentinker_runtime.ml`."""


class ModelSourceError(MLError, ValueError):
    """A model reference cannot be loaded: unknown builtin, missing directory, bad field.

    `field` names the offending ModelSource field (e.g. "name", "path").
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class CheckpointError(MLError, ValueError):
    """A checkpoint id is malformed or a checkpoint directory is unreadable."""


class CheckpointNotFoundError(CheckpointError, LookupError):
    """No checkpoint with this id under the checkpoint root."""


class WeightsError(MLError, ValueError):
    """A weights transfer does not match its header (unknown tensor, size or sha256)."""
