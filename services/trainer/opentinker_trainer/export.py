"""ExportWeights: a consistent snapshot of the policy as a weights package, streamed in chunks
or written to one shared-memory file (`SharedExports`) whose name the header carries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import torch
from peft import PeftModel

from opentinker_runtime.ml.models import merged_copy
from opentinker_runtime.ml.shared_weights import SharedFile
from opentinker_runtime.ml.sources import LoraSpec
from opentinker_runtime.ml.weights import DEFAULT_CHUNK_BYTES, WeightsPackage, lora_state_dict, state_dict_to_package
from opentinker_trainer.errors import ValidationError
from opentinker_trainer.session import TrainingSession
from opentinker_trainer.shared_exports import SharedExports


class WeightsFormat(StrEnum):
    LORA_ADAPTER = "lora_adapter"  # adapter tensors only (peft names)
    FULL = "full"                  # every parameter, LoRA merged (plain model names)


@dataclass(frozen=True, kw_only=True)
class WeightsExport:
    """Header fields and the package whose chunks follow (none when `shared_file` is set)."""

    format: WeightsFormat
    policy_version: int
    lora: LoraSpec | None
    package: WeightsPackage
    shared_file: SharedFile | None = None


def export_weights(session: TrainingSession, format: WeightsFormat | None = None, *,
                   chunk_bytes: int = 0) -> WeightsExport:
    """Snapshot (copy) the weights now, so later steps cannot change the streamed bytes.

    format None = LORA_ADAPTER for LoRA sessions, FULL otherwise; chunk_bytes 0 = 4 MiB - 64 KiB.
    """
    if chunk_bytes < 0:
        raise ValidationError("chunk_bytes", f"must be >= 0, got {chunk_bytes}")
    format = resolve_format(session, format)
    source, private = _source(session, format)
    snapshot = source if private else {name: tensor.detach().clone() for name, tensor in source.items()}
    package = state_dict_to_package(snapshot, chunk_bytes=chunk_bytes or DEFAULT_CHUNK_BYTES)
    return _export(session, format, package)


def export_weights_shared(session: TrainingSession, format: WeightsFormat | None,
                          shared: SharedExports) -> WeightsExport | None:
    """Write the weights to one shared-memory file (no other copy: call under the session's lock);
    None when shared memory is off or full here (stream instead)."""
    format = resolve_format(session, format)
    source, _ = _source(session, format)
    written = shared.write(session.session_id, source)
    if written is None:
        return None
    package = WeightsPackage(written.specs, written.checksum, iter(()))
    return _export(session, format, package, shared_file=written.file)


def export_for_transport(session: TrainingSession, format: WeightsFormat | None, shared: SharedExports, *,
                         shared_memory: bool, chunk_bytes: int) -> WeightsExport:
    """A shared-memory file when asked for and possible here, else the stream (either way the
    session's previous file goes). Call under the session's lock."""
    if shared_memory:
        export = export_weights_shared(session, format, shared)
        if export is not None:
            return export
    shared.forget(session.session_id)
    return export_weights(session, format, chunk_bytes=chunk_bytes)


def resolve_format(session: TrainingSession, format: WeightsFormat | None) -> WeightsFormat:
    """format None = LORA_ADAPTER for LoRA sessions (only the adapter moves), FULL otherwise."""
    lora = session.spec.lora
    format = format or (WeightsFormat.LORA_ADAPTER if lora else WeightsFormat.FULL)
    if format == WeightsFormat.LORA_ADAPTER and lora is None:
        raise ValidationError("format", "WEIGHTS_FORMAT_LORA_ADAPTER needs a LoRA session; this "
                              "session trains all parameters (use WEIGHTS_FORMAT_FULL)")
    return format


def _source(session: TrainingSession, format: WeightsFormat) -> tuple[Mapping[str, torch.Tensor], bool]:
    """The tensors to export, and whether they are a private copy already (a merged LoRA model)."""
    if format == WeightsFormat.LORA_ADAPTER:
        return lora_state_dict(session.model), False
    return merged_copy(session.model).state_dict(), isinstance(session.model, PeftModel)


def _export(session: TrainingSession, format: WeightsFormat, package: WeightsPackage, *,
            shared_file: SharedFile | None = None) -> WeightsExport:
    lora = session.spec.lora if format == WeightsFormat.LORA_ADAPTER else None
    return WeightsExport(format=format, policy_version=session.policy_version, lora=lora,
                         package=package, shared_file=shared_file)
