"""Loading one rank's TrainingSession: the base model (or a checkpoint), the seeded adapter, the
frozen reference copy; errors name the spec field at fault."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from opentinker_runtime.ml.errors import CheckpointError, ModelSourceError
from opentinker_runtime.ml.models import apply_lora, load_model
from opentinker_runtime.ml.sources import LoraSpec
from opentinker_trainer.config import SessionSpec
from opentinker_trainer.errors import CheckpointNotFoundError, ValidationError
from opentinker_trainer.memory import session_micro_batch_tokens
from opentinker_trainer.session import TrainingSession
from opentinker_trainer.shared_base import BaseHandle, SharedBases

T = TypeVar("T")


def load_rank_session(session_id: str, spec: SessionSpec, *, checkpoint_root: Path,
                      device: str = "cpu", device_ids: tuple[str, ...] = ("cpu:0",),
                      rank: int = 0, group: Any | None = None,
                      bases: SharedBases | None = None) -> TrainingSession:
    """One rank's session: load the base model (a LoRA session given `bases`: a shell of the
    shared one), add the adapter (seeded), keep a reference copy when asked. Starts no replica
    (`session_factory.create_session` does)."""
    handle = _shared_base(spec, bases, checkpoint_root, device) if spec.lora is not None and bases else None
    try:
        model, tokenizer = (handle.model, handle.tokenizer) if handle else _private_base(spec, checkpoint_root, device)
        if spec.lora is not None:
            model = _with_lora(model, spec.lora, spec.seed)
        if handle is not None:
            handle.adopt(model)
        reference = _frozen_copy(model) if spec.lora is None and spec.keep_reference else None
        return TrainingSession(session_id=session_id, spec=spec, model=model,
                               tokenizer=tokenizer, reference_model=reference,
                               device=device, device_ids=device_ids, rank=rank, group=group,
                               micro_batch_tokens=session_micro_batch_tokens(
                                   spec.max_tokens_per_micro_batch, model, device),
                               base=handle)
    except BaseException:
        if handle is not None:
            handle.release()
        raise


def replica_device(device: str, device_id: str) -> str:
    """The torch device of a leased device id: "cuda:1" on a GPU worker, "cpu" for "cpu:N"."""
    return device_id if device.startswith("cuda") and device_id.startswith("cuda") else device


def _private_base(spec: SessionSpec, checkpoint_root: Path, device: str) -> tuple[Any, Any]:
    loaded = _with_field_errors(spec, lambda: load_model(spec.base, checkpoint_root, device=device))
    return loaded.model, loaded.tokenizer


def _shared_base(spec: SessionSpec, bases: SharedBases, checkpoint_root: Path, device: str) -> BaseHandle:
    return _with_field_errors(spec, lambda: bases.acquire(spec.base, checkpoint_root, device))


def _with_field_errors(spec: SessionSpec, load: Callable[[], T]) -> T:
    """`load()`, its model-source errors named by the spec field at fault."""
    try:
        return load()
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
