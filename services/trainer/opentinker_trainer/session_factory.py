"""Creating a training session: one rank's session, and with several devices (rank 0 only) the
replicas of a data-parallel session (on this worker's further devices, and on other workers'
devices of the same lease: `remote`), every replica starting from rank 0's parameters."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from opentinker_trainer.collectives import DEFAULT_COLLECTIVE_TIMEOUT_S, broadcast_parameters
from opentinker_trainer.config import SessionSpec
from opentinker_trainer.replicas import RemoteRanks, ReplicaGroup
from opentinker_trainer.session import TrainingSession
from opentinker_trainer.session_loading import load_rank_session, replica_device
from opentinker_trainer.shared_base import SharedBases


def create_session(session_id: str, spec: SessionSpec, *, checkpoint_root: Path,
                   device: str = "cpu", device_ids: tuple[str, ...] = ("cpu:0",),
                   bases: SharedBases | None = None, remote: RemoteRanks | None = None,
                   collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S) -> TrainingSession:
    """A session on `device_ids`: data-parallel (one replica process per further device, and
    the ranks `remote` peers start) when there are several. A LoRA session on one device stands
    on a base shared through `bases` (when given); a data-parallel one loads a base of its own."""
    data_parallel = len(device_ids) > 1 or bool(remote and remote.peers)
    session = load_rank_session(session_id, spec, checkpoint_root=checkpoint_root, device=device,
                                device_ids=device_ids, bases=None if data_parallel else bases)
    if data_parallel:
        _start_replicas(session, checkpoint_root, remote, collective_timeout_s)
    return session


def _start_replicas(session: TrainingSession, checkpoint_root: Path, remote: RemoteRanks | None,
                    timeout_s: float) -> None:
    devices = [replica_device(session.device, device_id) for device_id in session.device_ids]
    spec = dataclasses.replace(session.spec, max_tokens_per_micro_batch=session.micro_batch_tokens)
    try:
        session.replicas = ReplicaGroup(spec, devices=devices, checkpoint_root=checkpoint_root, remote=remote,
                                        timeout_s=timeout_s)
    except Exception:
        session.close()
        raise
    session.group = session.replicas.group
    try:
        broadcast_parameters(session.group, list(session.model.parameters()))
    except Exception:
        session.close()
        raise
