"""The tokenizer of a model source, without loading its weights (for data preparation)."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from opentinker.ml import checkpoints
from opentinker.ml.errors import ModelSourceError
from opentinker.ml.sources import ModelKind, ModelSource
from opentinker.ml.tokenizer import build_byte_tokenizer


def load_tokenizer(source: ModelSource, checkpoint_root: Path | None = None) -> PreTrainedTokenizerBase:
    """Builtins use the project's byte tokenizer; local dirs and checkpoints their saved one."""
    if source.kind == ModelKind.BUILTIN:
        return build_byte_tokenizer()
    if source.kind == ModelKind.LOCAL:
        return _from_directory(Path(source.tokenizer_path or source.path), "tokenizer_path")
    if checkpoint_root is None:
        raise ModelSourceError("checkpoint_id", "a checkpoint source needs the checkpoint root")
    model_dir = checkpoints.checkpoint_path(checkpoint_root, source.name) / checkpoints.MODEL_DIR
    if model_dir.is_dir():
        return _from_directory(model_dir, "checkpoint_id")
    return load_tokenizer(checkpoints.read_manifest(checkpoint_root, source.name).base, checkpoint_root)


def _from_directory(directory: Path, field: str) -> PreTrainedTokenizerBase:
    if not directory.is_dir():
        raise ModelSourceError(field, f"{directory} is not a directory on this worker")
    return AutoTokenizer.from_pretrained(directory, local_files_only=True)
