"""The shared-memory weights directory setting of the Trainer and the Rollout (no torch import:
settings parse before torch loads). `opentinker_runtime.ml.shared_weights` uses the directory."""

from __future__ import annotations

from typing import Any

from opentinker_runtime.core.settings import setting

SHARED_WEIGHTS_DIR_ENV = "OPENTINKER_SHARED_WEIGHTS_DIR"
DEFAULT_SHARED_WEIGHTS_DIR = "/dev/shm/opentinker-weights"


def shared_weights_dir_setting(doc: str) -> Any:
    """The `shared_weights_dir` settings field, read from the shared OPENTINKER_SHARED_WEIGHTS_DIR."""
    return setting(DEFAULT_SHARED_WEIGHTS_DIR, doc + " Empty = off (weights always stream).",
                   env=SHARED_WEIGHTS_DIR_ENV, type_name="path", optional=True)
