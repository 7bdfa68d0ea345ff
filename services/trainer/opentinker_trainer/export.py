"""ExportWeights: a consistent snapshot of the policy as a weights package."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from opentinker.ml.models import merged_copy
from opentinker.ml.sources import LoraSpec
from opentinker.ml.weights import DEFAULT_CHUNK_BYTES, WeightsPackage, lora_state_dict, state_dict_to_package
from opentinker_trainer.errors import ValidationError
from opentinker_trainer.session import TrainingSession


class WeightsFormat(StrEnum):
    LORA_ADAPTER = "lora_adapter"  # adapter tensors only (peft names)
    FULL = "full"                  # every parameter, LoRA merged (plain model names)


@dataclass(frozen=True, kw_only=True)
class WeightsExport:
    """Header fields and the package whose chunks follow."""

    format: WeightsFormat
    policy_version: int
    lora: LoraSpec | None
    package: WeightsPackage


def export_weights(session: TrainingSession, format: WeightsFormat | None = None, *,
                   chunk_bytes: int = 0) -> WeightsExport:
    """Snapshot (copy) the weights now, so later steps cannot change the streamed bytes.

    format None = LORA_ADAPTER for LoRA sessions, FULL otherwise; chunk_bytes 0 = 1 MiB.
    """
    if chunk_bytes < 0:
        raise ValidationError("chunk_bytes", f"must be >= 0, got {chunk_bytes}")
    lora = session.spec.lora
    format = format or (WeightsFormat.LORA_ADAPTER if lora else WeightsFormat.FULL)
    if format == WeightsFormat.LORA_ADAPTER and lora is None:
        raise ValidationError("format", "WEIGHTS_FORMAT_LORA_ADAPTER needs a LoRA session; this "
                              "session trains all parameters (use WEIGHTS_FORMAT_FULL)")
    source = lora_state_dict(session.model) if format == WeightsFormat.LORA_ADAPTER \
        else merged_copy(session.model).state_dict()
    snapshot = {name: tensor.detach().clone() for name, tensor in source.items()}
    package = state_dict_to_package(snapshot, chunk_bytes=chunk_bytes or DEFAULT_CHUNK_BYTES)
    return WeightsExport(format=format, policy_version=session.policy_version,
                         lora=lora if format == WeightsFormat.LORA_ADAPTER else None, package=package)
