"""Torch-free value types describing a model: where it comes from, how it is adapted, what it is.

`ModelSource` is the domain twin of `common.v1.ModelReference`, `LoraSpec` of
`common.v1.LoraAdaptation` and `ModelInfo` of `common.v1.ModelInfo`. They serialise to plain
dicts for checkpoint manifests. `opentinker_runtime.ml.models` re-exports them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from opentinker_runtime.ml.errors import ModelSourceError


class ModelKind(StrEnum):
    """Where base weights come from."""

    BUILTIN = "builtin"
    LOCAL = "local"
    CHECKPOINT = "checkpoint"


class Precision(StrEnum):
    """Numeric precision the weights are held in; DEFAULT = float32 on CPU."""

    DEFAULT = "default"
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    """A model to load. Which fields matter depends on `kind`:

    builtin: `name` (a key of BUILTIN_MODELS) and `seed`; local: `path` (an HF model directory)
    and optional `tokenizer_path`; checkpoint: `name` is the checkpoint id.
    """

    kind: str
    name: str = ""
    seed: int = 0
    path: str = ""
    tokenizer_path: str = ""
    precision: str = Precision.DEFAULT

    def __post_init__(self) -> None:
        _require_member(ModelKind, "kind", self.kind)
        _require_member(Precision, "precision", self.precision)
        if self.kind in (ModelKind.BUILTIN, ModelKind.CHECKPOINT) and not self.name:
            noun = "builtin model name" if self.kind == ModelKind.BUILTIN else "checkpoint id"
            raise ModelSourceError("name", f"a {self.kind} source needs a {noun}")
        if self.kind == ModelKind.LOCAL and not self.path:
            raise ModelSourceError("path", "a local source needs the model directory's path")

    @classmethod
    def builtin(cls, name: str, seed: int = 0, precision: str = Precision.DEFAULT) -> ModelSource:
        return cls(kind=ModelKind.BUILTIN, name=name, seed=seed, precision=precision)

    @classmethod
    def local(cls, path: str, tokenizer_path: str = "",
              precision: str = Precision.DEFAULT) -> ModelSource:
        return cls(kind=ModelKind.LOCAL, path=path, tokenizer_path=tokenizer_path,
                   precision=precision)

    @classmethod
    def checkpoint(cls, checkpoint_id: str, precision: str = Precision.DEFAULT) -> ModelSource:
        return cls(kind=ModelKind.CHECKPOINT, name=checkpoint_id, precision=precision)

    def to_dict(self) -> dict[str, Any]:
        return {key: str(value) if isinstance(value, StrEnum) else value
                for key, value in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSource:
        return cls(**data)

    @property
    def model_key(self) -> str:
        """What a worker and the Scheduler both call this base (e.g.
        "builtin:tiny-llama@0/default"): equal for sources that load the same weights, readable
        in a workers listing. Placement puts a LoRA job where its base's key is resident."""
        what = self.path if self.kind == ModelKind.LOCAL else self.name
        seed = f"@{self.seed}" if self.kind == ModelKind.BUILTIN else ""
        tokenizer = f"+{self.tokenizer_path}" if self.tokenizer_path else ""
        return f"{self.kind}:{what}{seed}{tokenizer}/{self.precision}"


@dataclass(frozen=True, kw_only=True)
class LoraSpec:
    """A low-rank adapter (peft). Empty `target_modules` = every linear layer but the head."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ModelSourceError("rank", f"LoRA rank must be >= 1, got {self.rank}")
        if self.alpha <= 0:
            raise ModelSourceError("alpha", f"LoRA alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ModelSourceError("dropout", f"LoRA dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "target_modules": list(self.target_modules)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoraSpec:
        return cls(**{**data, "target_modules": tuple(data.get("target_modules", ()))})


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """What a worker reports about a loaded model."""

    architecture: str
    parameter_count: int
    trainable_parameter_count: int
    vocab_size: int
    max_context_length: int
    stop_token_ids: tuple[int, ...] = field(default=())


def _require_member(enum_cls: type[StrEnum], field_name: str, value: str) -> None:
    allowed = [str(member) for member in enum_cls]
    if value not in allowed:
        raise ModelSourceError(field_name, f"{value!r} is not one of {', '.join(allowed)}")
