"""One conversion of the wire's ModelReference / Adaptation into ml domain objects.

Trainer, Rollout and Coordinator all read the same messages; converting them in one place
keeps the three in agreement on defaults (a LoRA adapter with alpha 0 means alpha = 2 x
rank everywhere, or Rollout would sample from a policy the Trainer never trained).
Errors are `ModelRefError(field, message)`, which each service maps to its own
INVALID_ARGUMENT type. Imports no torch.
"""

from __future__ import annotations

from opentinker_api.common.v1 import model_pb2
from opentinker_runtime.ml.errors import ModelSourceError
from opentinker_runtime.ml.sources import LoraSpec, ModelSource, Precision

DEFAULT_LORA_RANK = 8
PRECISIONS = {model_pb2.PRECISION_UNSPECIFIED: Precision.DEFAULT, model_pb2.PRECISION_FLOAT32: Precision.FLOAT32,
              model_pb2.PRECISION_BFLOAT16: Precision.BFLOAT16, model_pb2.PRECISION_FLOAT16: Precision.FLOAT16}


class ModelRefError(ValueError):
    """A model reference or adaptation field is malformed; `field` is its path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


MAX_PATH_BYTES, MAX_NAME_BYTES = 4096, 255  # PATH_MAX, NAME_MAX: longer paths are OSErrors


def check_path(path: str, field: str) -> None:
    """A path the filesystem can look up (else os.stat raises OSError, not "not found")."""
    encoded = path.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")):
        raise ModelRefError(field, f"must be at most {MAX_PATH_BYTES} bytes, each name at most {MAX_NAME_BYTES}")


def model_source(reference: model_pb2.ModelReference, field: str = "model") -> ModelSource:
    kind = reference.WhichOneof("source")
    if kind == "local":
        check_path(reference.local.path, f"{field}.local.path")
        check_path(reference.local.tokenizer_path, f"{field}.local.tokenizer_path")
    precision = PRECISIONS.get(reference.precision)
    if precision is None:
        raise ModelRefError(f"{field}.precision", f"unknown value {reference.precision}")
    try:
        if kind == "builtin":
            return ModelSource.builtin(reference.builtin.name, reference.builtin.seed, precision)
        if kind == "local":
            return ModelSource.local(reference.local.path, reference.local.tokenizer_path, precision)
        if kind == "checkpoint":
            return ModelSource.checkpoint(reference.checkpoint.checkpoint_id, precision)
    except ModelSourceError as error:
        inner = "checkpoint_id" if kind == "checkpoint" else error.field
        raise ModelRefError(f"{field}.{kind}.{inner}", error.message) from error
    raise ModelRefError(field, f"set one of {field}.builtin, {field}.local or {field}.checkpoint")


def lora_spec(adaptation: model_pb2.Adaptation, field: str = "adaptation") -> LoraSpec | None:
    """The LoRA adapter, or None for full-parameter training. rank 0 = 8, alpha 0 = 2 x rank."""
    if adaptation.WhichOneof("kind") != "lora":
        return None
    lora = adaptation.lora
    rank = lora.rank or DEFAULT_LORA_RANK
    try:
        return LoraSpec(rank=rank, alpha=lora.alpha or 2.0 * rank, dropout=lora.dropout,
                        target_modules=tuple(lora.target_modules))
    except ModelSourceError as error:
        raise ModelRefError(f"{field}.lora.{error.field}", error.message) from error
