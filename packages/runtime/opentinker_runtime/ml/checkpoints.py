"""Checkpoint directories shared by Trainer (writes) and Rollout (reads). Torch-free.

Layout under the checkpoint root (settings field `checkpoint_dir`, env OPENTINKER_CHECKPOINT_DIR):

    <root>/<checkpoint_id>/checkpoint.json   manifest: format, base source, LoRA spec, step, ...
    <root>/<checkpoint_id>/model/            HF model directory incl. tokenizer (full weights)
    <root>/<checkpoint_id>/adapter/          peft adapter directory (LoRA sessions)
    <root>/<checkpoint_id>/training_state.pt optimizer, RNG, step, data cursor (exact resume)

A checkpoint is written into a hidden temporary directory and renamed into place, so readers
never see a half-written one.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from opentinker_runtime.core.settings import setting
from opentinker_runtime.ml.errors import CheckpointError, CheckpointNotFoundError
from opentinker_runtime.ml.sources import LoraSpec, ModelSource

SHARED_CHECKPOINT_DIR_ENV = "OPENTINKER_CHECKPOINT_DIR"
DEFAULT_CHECKPOINT_DIR = Path(".opentinker/checkpoints")
MANIFEST_FILE = "checkpoint.json"
MODEL_DIR = "model"
ADAPTER_DIR = "adapter"
TRAINING_STATE_FILE = "training_state.pt"
CHECKPOINT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def checkpoint_dir_setting(doc: str = "Directory of checkpoints, shared by Trainer (writes) and "
                           "Rollout (reads).") -> Any:
    """The `checkpoint_dir` settings field, read from the shared OPENTINKER_CHECKPOINT_DIR."""
    return setting(DEFAULT_CHECKPOINT_DIR, doc, env=SHARED_CHECKPOINT_DIR_ENV, type_name="path")


class CheckpointFormat(StrEnum):
    """What a checkpoint holds (twin of trainer.v1.CheckpointFormat)."""

    TRAINING_STATE = "training_state"  # weights + optimizer + RNG + step + data cursor
    HF_MODEL = "hf_model"              # model/ only, merged full weights
    PEFT_ADAPTER = "peft_adapter"      # adapter/ only


@dataclass(frozen=True, kw_only=True)
class CheckpointManifest:
    """checkpoint.json: enough to rebuild the policy without the session that wrote it."""

    checkpoint_id: str
    format: CheckpointFormat
    base: ModelSource
    lora: LoraSpec | None = None
    step: int = 0
    policy_version: int = 0
    session_id: str = ""
    job_id: str = ""
    created_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id, "format": str(self.format),
                "base": self.base.to_dict(), "lora": self.lora.to_dict() if self.lora else None,
                "step": self.step, "policy_version": self.policy_version,
                "session_id": self.session_id, "job_id": self.job_id,
                "created_at": self.created_at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckpointManifest:
        lora = LoraSpec.from_dict(data["lora"]) if data.get("lora") else None
        return cls(**{**data, "format": CheckpointFormat(data["format"]),
                      "base": ModelSource.from_dict(data["base"]), "lora": lora})


def validate_checkpoint_id(checkpoint_id: str) -> str:
    """The id itself when it is a safe single directory name; CheckpointError otherwise."""
    if not CHECKPOINT_ID_PATTERN.match(checkpoint_id):
        raise CheckpointError(
            f"checkpoint id {checkpoint_id!r} must be 1-200 characters of letters, digits, "
            "'.', '_' or '-', starting with a letter or digit")
    return checkpoint_id


def checkpoint_path(root: Path, checkpoint_id: str) -> Path:
    """<root>/<checkpoint_id>, after checking the id cannot escape the root."""
    return Path(root) / validate_checkpoint_id(checkpoint_id)


def read_manifest(root: Path, checkpoint_id: str) -> CheckpointManifest:
    """The manifest of a checkpoint; CheckpointNotFoundError when there is none."""
    manifest_file = checkpoint_path(root, checkpoint_id) / MANIFEST_FILE
    if not manifest_file.is_file():
        raise CheckpointNotFoundError(f"no checkpoint {checkpoint_id!r} under {root}")
    try:
        return CheckpointManifest.from_dict(json.loads(manifest_file.read_text()))
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{manifest_file} is not a valid manifest: {error}") from error


def write_manifest(directory: Path, manifest: CheckpointManifest) -> None:
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest.to_dict(), indent=2) + "\n")


@contextmanager
def writing_checkpoint(root: Path, checkpoint_id: str) -> Iterator[Path]:
    """Yield an empty temporary directory; on success it replaces <root>/<checkpoint_id>."""
    target = checkpoint_path(root, checkpoint_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".tmp-{checkpoint_id}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        yield staging
        _replace_directory(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace_directory(source: Path, target: Path) -> None:
    if target.exists():
        retired = target.parent / f".old-{target.name}-{uuid.uuid4().hex[:8]}"
        target.rename(retired)
        shutil.rmtree(retired, ignore_errors=True)
    source.rename(target)


def directory_size(path: Path) -> int:
    """Total bytes of the regular files under `path`."""
    return sum(item.stat().st_size for item in Path(path).rglob("*") if item.is_file())
