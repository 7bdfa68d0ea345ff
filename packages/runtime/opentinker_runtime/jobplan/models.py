"""The wire's ModelReference and Adaptation as ml domain values, in one place.

A job's policies are resolved through it (`resolve_policy`), and the Trainer and Rollout convert
their own LoadModel / CreateSession requests with it, so the three agree on every default (a
LoRA alpha 0 is 2 x rank everywhere, or the Rollout would sample a policy the Trainer never
trained). Errors are ResolveError naming the field; imports no torch.
"""

from __future__ import annotations

from opentinker_api.common.v1 import model_pb2
from opentinker_runtime.jobplan import defaults
from opentinker_runtime.jobplan.bounds import MAX_LORA_RANK
from opentinker_runtime.jobplan.errors import ResolveError
from opentinker_runtime.jobplan.plan import AdaptationKind, AdaptationPlan
from opentinker_runtime.ml.errors import ModelSourceError
from opentinker_runtime.ml.sources import LoraSpec, ModelSource, Precision

PRECISIONS = {model_pb2.PRECISION_UNSPECIFIED: Precision.DEFAULT, model_pb2.PRECISION_FLOAT32: Precision.FLOAT32,
              model_pb2.PRECISION_BFLOAT16: Precision.BFLOAT16, model_pb2.PRECISION_FLOAT16: Precision.FLOAT16}
MAX_PATH_BYTES, MAX_NAME_BYTES = 4096, 255  # PATH_MAX, NAME_MAX: longer paths are OSErrors


def check_path(path: str, field: str) -> None:
    """A path the filesystem can look up (else os.stat raises OSError, not "not found")."""
    encoded = path.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")):
        raise ResolveError(field, f"must be at most {MAX_PATH_BYTES} bytes, each name at most {MAX_NAME_BYTES}")


def model_source(reference: model_pb2.ModelReference, field: str = "model") -> ModelSource:
    kind = reference.WhichOneof("source")
    if kind == "local":
        check_path(reference.local.path, f"{field}.local.path")
        check_path(reference.local.tokenizer_path, f"{field}.local.tokenizer_path")
    precision = PRECISIONS.get(reference.precision)
    if precision is None:
        raise ResolveError(f"{field}.precision", f"unknown value {reference.precision}")
    try:
        if kind == "builtin":
            return ModelSource.builtin(reference.builtin.name, reference.builtin.seed, precision)
        if kind == "local":
            return ModelSource.local(reference.local.path, reference.local.tokenizer_path, precision)
        if kind == "checkpoint":
            return ModelSource.checkpoint(reference.checkpoint.checkpoint_id, precision)
    except ModelSourceError as error:
        inner = "checkpoint_id" if kind == "checkpoint" else error.field
        raise ResolveError(f"{field}.{kind}.{inner}", error.message) from error
    raise ResolveError(field, f"set one of {field}.builtin, {field}.local or {field}.checkpoint")


def lora_spec(adaptation: model_pb2.Adaptation, field: str = "adaptation") -> LoraSpec | None:
    """The LoRA adapter (rank 0 = 8, alpha 0 = 2 x rank), or None for full-parameter training."""
    if adaptation.WhichOneof("kind") != "lora":
        return None
    lora = adaptation.lora
    rank = lora.rank or defaults.LORA_RANK
    if rank > MAX_LORA_RANK:
        raise ResolveError(f"{field}.lora.rank", f"must be at most {MAX_LORA_RANK}, got {rank} (the adapter's "
                           "matrices are allocated at once)")
    try:
        return LoraSpec(rank=rank, alpha=lora.alpha or defaults.LORA_ALPHA_PER_RANK * rank, dropout=lora.dropout,
                        target_modules=tuple(lora.target_modules))
    except ModelSourceError as error:
        raise ResolveError(f"{field}.lora.{error.field}", error.message) from error


def adaptation_plan(adaptation: model_pb2.Adaptation, field: str = "adaptation") -> AdaptationPlan:
    kind = adaptation.WhichOneof("kind")
    if kind == "lora":
        return AdaptationPlan(kind=AdaptationKind.LORA, lora=lora_spec(adaptation, field))
    if kind == "full":
        return AdaptationPlan(kind=AdaptationKind.FULL, keep_reference=adaptation.full.keep_reference)
    return AdaptationPlan(kind=AdaptationKind.NONE)
