"""Loading one rank's TrainingSession: the base model (or a checkpoint), the seeded adapter, the
frozen reference copy; errors name the spec field at fault."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from opentinker_runtime.ml.errors import CheckpointError, ModelSourceError
from opentinker_runtime.ml.models import apply_lora, load_model
from opentinker_runtime.ml.sources import LoraSpec
from opentinker_trainer.config import SessionSpec
from opentinker_trainer.errors import CheckpointNotFoundError, ValidationError
from opentinker_trainer.memory import session_micro_batch_tokens
from opentinker_trainer.session import TrainingSession


def load_rank_session(session_id: str, spec: SessionSpec, *, checkpoint_root: Path,
                      device: str = "cpu", device_ids: tuple[str, ...] = ("cpu:0",),
                      rank: int = 0, group: Any | None = None) -> TrainingSession:
    """One rank's session: load the base model, add the adapter (seeded), keep a reference copy
    when asked. Starts no replica (`session_factory.create_session` does)."""
    loaded = _load_base(spec, checkpoint_root, device)
    model = loaded.model
    if spec.lora is not None:
        model = _with_lora(model, spec.lora, spec.seed)
    reference = _frozen_copy(model) if spec.lora is None and spec.keep_reference else None
    session = TrainingSession(session_id=session_id, spec=spec, model=model,
                              tokenizer=loaded.tokenizer, reference_model=reference,
                              device=device, device_ids=device_ids, rank=rank, group=group,
                              micro_batch_tokens=session_micro_batch_tokens(
                                  spec.max_tokens_per_micro_batch, model, device))
    return session


def replica_device(device: str, device_id: str) -> str:
    """The torch device of a leased device id: "cuda:1" on a GPU worker, "cpu" for "cpu:N"."""
    return device_id if device.startswith("cuda") and device_id.startswith("cuda") else device


def _load_base(spec: SessionSpec, checkpoint_root: Path, device: str) -> Any:
    try:
        return load_model(spec.base, checkpoint_root, device=device)
    except CheckpointError as error:
        if isinstance(error, LookupError):
            raise CheckpointNotFoundError(f"base_model.checkpoint.checkpoint_id: {error}") from error
        raise ValidationError("base_model.checkpoint.checkpoint_id", str(error)) from error
    except ModelSourceError as error:
        field = "checkpoint_id" if spec.base.kind == "checkpoint" else error.field
        raise ValidationError(f"base_model.{spec.base.kind}.{field}", error.message) from error


def _with_lora(model: Any, lora: LoraSpec, seed: int) -> Any:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return apply_lora(model, lora)
        except ModelSourceError as error:
            raise ValidationError(f"adaptation.lora.{error.field}", error.message) from error


def _frozen_copy(model: Any) -> Any:
    reference = copy.deepcopy(model).eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return reference
