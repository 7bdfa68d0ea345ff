"""The tokenizer of a model source, without loading its weights (for data preparation)."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from opentinker_runtime.ml import checkpoints
from opentinker_runtime.ml.errors import ModelSourceError
from opentinker_runtime.ml.sources import ModelKind, ModelSource
from opentinker_runtime.ml.tokenizer import build_byte_tokenizer


def load_tokenizer(source: ModelSource, checkpoint_root: Path | None = None) -> PreTrainedTokenizerBase:
    """Builtins use the project's byte tokenizer; local dirs and checkpoints their saved one."""
    if source.kind == ModelKind.BUILTIN:
        return build_byte_tokenizer()
    if source.kind == ModelKind.LOCAL:
        return load_directory_tokenizer(Path(source.tokenizer_path or source.path), "tokenizer_path")
    if checkpoint_root is None:
        raise ModelSourceError("checkpoint_id", "a checkpoint source needs the checkpoint root")
    model_dir = checkpoints.checkpoint_path(checkpoint_root, source.name) / checkpoints.MODEL_DIR
    if model_dir.is_dir():
        return load_directory_tokenizer(model_dir, "checkpoint_id")
    return load_tokenizer(checkpoints.read_manifest(checkpoint_root, source.name).base, checkpoint_root)


def not_a_model_directory(field: str, directory: Path) -> ModelSourceError:
    """The one answer for a model or tokenizer directory that is missing, unreadable or holds no model."""
    return ModelSourceError(field, f"{directory} is not a model directory on this worker (config.json, weights "
                                   "and tokenizer files it can read; a GGUF file is not one: convert it first, "
                                   "e.g. transformers' from_pretrained(dir, gguf_file=...) then save_pretrained)")


def load_directory_tokenizer(directory: Path, field: str) -> PreTrainedTokenizerBase:
    """The tokenizer saved in `directory`; ModelSourceError (never transformers' own errors) otherwise."""
    if not directory.is_dir():
        raise not_a_model_directory(field, directory)
    try:
        return AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - ValueError, OSError, JSON errors alike
        raise not_a_model_directory(field, directory) from error
