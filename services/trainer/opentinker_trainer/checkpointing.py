"""SaveCheckpoint / LoadCheckpoint of a session, in the shared checkpoint layout
(`opentinker_runtime.ml.checkpoints`).

TRAINING_STATE holds the weights (adapter/ for LoRA, model/ for full) plus training_state.pt
(AdamW state, the dropout RNG state of every rank, step, policy version, data cursor, the last
OptimStepRequest.adam): loading it resumes exactly. HF_MODEL holds model/ (LoRA merged); PEFT_ADAPTER holds adapter/ (LoRA only).
Loading a weights-only checkpoint replaces the weights and resets AdamW's moments, keeping the step.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft.utils import load_peft_weights
from transformers import AutoModelForCausalLM

from opentinker_runtime.ml import checkpoints
from opentinker_runtime.ml.checkpoints import CheckpointFormat, CheckpointManifest
from opentinker_runtime.ml.errors import CheckpointError, WeightsError
from opentinker_runtime.ml.models import save_model_dir
from opentinker_runtime.ml.weights import load_lora_state_dict
from opentinker_trainer.config import AdamStep
from opentinker_trainer.errors import CheckpointNotFoundError, ValidationError
from opentinker_trainer.collectives import rank_rng_state
from opentinker_trainer.session import TrainingSession

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
STATE_FORMAT_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class CheckpointRecord:
    """A written checkpoint, as SaveCheckpoint reports it."""

    checkpoint_id: str
    session_id: str
    format: CheckpointFormat
    path: Path
    step: int
    size_bytes: int
    created_at: float


def checkpoint_id_for(session: TrainingSession, name: str) -> str:
    """"<job or session id>-<name>", name defaulting to "step-<step>"."""
    name = name or f"step-{session.step}"
    if not NAME_PATTERN.match(name):
        raise ValidationError("name", f"{name!r} must be 1-100 letters, digits, '.', '_' or '-', "
                              "starting with a letter or digit")
    return f"{session.spec.job_id or session.session_id}-{name}"


def save_checkpoint(session: TrainingSession, root: Path, *, format: CheckpointFormat,
                    name: str = "", data_cursor: bytes = b"") -> CheckpointRecord:
    """Write the session's checkpoint atomically under `root`."""
    if format == CheckpointFormat.PEFT_ADAPTER and session.spec.lora is None:
        raise ValidationError("format", "CHECKPOINT_FORMAT_PEFT_ADAPTER needs a LoRA session; "
                              "this session trains all parameters (use HF_MODEL)")
    manifest = _manifest(session, checkpoint_id_for(session, name), format)
    with checkpoints.writing_checkpoint(root, manifest.checkpoint_id) as staging:
        _write_weights(session, staging, format)
        if format == CheckpointFormat.TRAINING_STATE:
            torch.save(_training_state(session, data_cursor), staging / checkpoints.TRAINING_STATE_FILE)
        checkpoints.write_manifest(staging, manifest)
    path = checkpoints.checkpoint_path(root, manifest.checkpoint_id).resolve()
    return CheckpointRecord(checkpoint_id=manifest.checkpoint_id, session_id=session.session_id,
                            format=format, path=path, step=session.step,
                            size_bytes=checkpoints.directory_size(path), created_at=manifest.created_at)


def _manifest(session: TrainingSession, checkpoint_id: str,
              format: CheckpointFormat) -> CheckpointManifest:
    return CheckpointManifest(checkpoint_id=checkpoint_id, format=format, base=session.spec.base,
                              lora=session.spec.lora, step=session.step,
                              policy_version=session.policy_version,
                              session_id=session.session_id, job_id=session.spec.job_id)


def _write_weights(session: TrainingSession, staging: Path, format: CheckpointFormat) -> None:
    if session.spec.lora is not None and format != CheckpointFormat.HF_MODEL:
        session.model.save_pretrained(staging / checkpoints.ADAPTER_DIR)
    else:
        save_model_dir(session.model, session.tokenizer, staging / checkpoints.MODEL_DIR)


def _training_state(session: TrainingSession, data_cursor: bytes) -> dict[str, Any]:
    return {"format_version": STATE_FORMAT_VERSION, "optimizer": session.optimizer.state_dict(),
            "rng_state": session.rng_state, "replica_rng_states": session.replica_rng_states(),
            "step": session.step, "adam_override": _adam_override_state(session.adam_override),
            "policy_version": session.policy_version, "data_cursor_hex": bytes(data_cursor).hex()}


def _adam_override_state(adam: AdamStep | None) -> dict[str, float] | None:
    """OptimStepRequest.adam's last values (None: the session follows its optimizer config)."""
    return None if adam is None else dataclasses.asdict(adam)


def load_checkpoint(session: TrainingSession, root: Path, checkpoint_id: str, *, weights_only: bool = False) -> bytes:
    """Load a checkpoint into the session; the stored data cursor (empty if none). weights_only:
    the weights alone, with the optimizer's state cleared (the step and RNG stay the session's)."""
    manifest = _read_manifest(root, checkpoint_id)
    _check_compatible(session, manifest)
    directory = checkpoints.checkpoint_path(root, checkpoint_id)
    _load_weights(session, directory)
    session.optimizer.zero_grad(set_to_none=True)
    session.pending_datums = 0
    cursor = b""
    if manifest.format == CheckpointFormat.TRAINING_STATE and not weights_only:
        cursor = _restore_training_state(session, directory / checkpoints.TRAINING_STATE_FILE)
    else:
        session.optimizer.state.clear()
    session.policy_version = max(session.policy_version, manifest.policy_version) + 1
    if session.replicas:
        session.replicas.call_all("load_checkpoint", checkpoint_id, weights_only)
    return cursor


def _read_manifest(root: Path, checkpoint_id: str) -> CheckpointManifest:
    try:
        return checkpoints.read_manifest(root, checkpoint_id)
    except checkpoints.CheckpointNotFoundError as error:
        raise CheckpointNotFoundError(f"checkpoint_id: {error}") from error
    except CheckpointError as error:
        raise ValidationError("checkpoint_id", str(error)) from error


def _check_compatible(session: TrainingSession, manifest: CheckpointManifest) -> None:
    ours, theirs = session.spec.lora, manifest.lora
    if manifest.format == CheckpointFormat.HF_MODEL and ours is not None:
        raise ValidationError("checkpoint_id", "an HF_MODEL checkpoint holds merged full weights; "
                              "load it into a full session or use it as base_model.checkpoint")
    if manifest.format != CheckpointFormat.HF_MODEL and ours != theirs:
        raise ValidationError("checkpoint_id", f"written by a session with LoRA {theirs}, this "
                              f"session has LoRA {ours}; the adaptations must match")


def _load_weights(session: TrainingSession, directory: Path) -> None:
    adapter_dir = directory / checkpoints.ADAPTER_DIR
    try:
        if adapter_dir.is_dir():
            load_lora_state_dict(session.model, load_peft_weights(str(adapter_dir), device="cpu"))
            return
        model_dir = directory / checkpoints.MODEL_DIR
        stored = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
        session.model.load_state_dict(stored.state_dict())
    except (WeightsError, RuntimeError) as error:  # RuntimeError: load_state_dict mismatch
        raise ValidationError("checkpoint_id", f"weights do not fit this session's model: {error}") from error


def _rank_rng_state(session: TrainingSession, state: dict[str, Any]) -> torch.Tensor:
    """The saved dropout RNG state of the session's rank; a replica whose rank the checkpoint
    lacks (it was written with fewer devices) starts its rank's stream afresh."""
    if session.rank == 0:
        return state["rng_state"]
    replicas = state.get("replica_rng_states", [])
    if session.rank <= len(replicas):
        return replicas[session.rank - 1]
    return rank_rng_state(session.spec.seed, session.rank)


def _restore_training_state(session: TrainingSession, state_file: Path) -> bytes:
    state = torch.load(state_file, map_location="cpu", weights_only=True)
    session.optimizer.load_state_dict(state["optimizer"])
    session.rng_state = _rank_rng_state(session, state)
    session.step = int(state["step"])
    override = state.get("adam_override")  # absent in checkpoints written before it existed
    session.adam_override = None if override is None else AdamStep(**override)
    return bytes.fromhex(state["data_cursor_hex"])
