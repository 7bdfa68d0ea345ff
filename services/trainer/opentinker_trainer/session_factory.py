"""Creating a training session: one rank's session, and with several devices (rank 0 only) the
replica processes of a data-parallel session, every replica starting from rank 0's parameters."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from opentinker_trainer.collectives import broadcast_parameters
from opentinker_trainer.config import SessionSpec
from opentinker_trainer.replicas import ReplicaGroup
from opentinker_trainer.session import TrainingSession
from opentinker_trainer.session_loading import load_rank_session, replica_device
from opentinker_trainer.shared_base import SharedBases


def create_session(session_id: str, spec: SessionSpec, *, checkpoint_root: Path,
                   device: str = "cpu", device_ids: tuple[str, ...] = ("cpu:0",),
                   bases: SharedBases | None = None) -> TrainingSession:
    """A session on `device_ids`: data-parallel (one replica process per further device) when
    there are several. A LoRA session on one device stands on a base shared through `bases`
    (when given); a data-parallel one loads a base of its own."""
    shared = bases if len(device_ids) == 1 else None
    session = load_rank_session(session_id, spec, checkpoint_root=checkpoint_root, device=device,
                                device_ids=device_ids, bases=shared)
    if len(device_ids) > 1:
        _start_replicas(session, checkpoint_root)
    return session


def _start_replicas(session: TrainingSession, checkpoint_root: Path) -> None:
    devices = [replica_device(session.device, device_id) for device_id in session.device_ids]
    spec = dataclasses.replace(session.spec, max_tokens_per_micro_batch=session.micro_batch_tokens)
    session.replicas = ReplicaGroup(spec, devices=devices, checkpoint_root=checkpoint_root)
    session.group = session.replicas.group
    try:
        broadcast_parameters(session.group, list(session.model.parameters()))
    except Exception:
        session.close()
        raise
