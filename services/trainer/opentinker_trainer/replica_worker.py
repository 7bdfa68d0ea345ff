"""The process of one data-parallel replica (rank >= 1): builds its TrainingSession, joins the
session's gloo group, then answers rank 0's commands until told to close or its pipe breaks
(rank 0's process died)."""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from opentinker_trainer.config import SessionSpec


def serve_replica(pipe: Connection, spec: SessionSpec, checkpoint_root: str, device: str,
                  rank: int, world_size: int, port: int, share_prefixes: bool = True) -> None:
    from opentinker_runtime.core.torch_threads import resolve_torch_threads, set_torch_threads
    from opentinker_runtime.ml.models import quiet_transformers
    from opentinker_trainer import shared_prefix
    from opentinker_trainer.collectives import broadcast_parameters, join_group
    from opentinker_trainer.session_loading import load_rank_session

    set_torch_threads(resolve_torch_threads(0).threads)  # rank 0's count: it exported OMP_NUM_THREADS
    shared_prefix.set_enabled(share_prefixes)
    quiet_transformers()
    group = join_group(port, rank, world_size)
    try:
        session = load_rank_session(f"replica-{rank}", spec, checkpoint_root=Path(checkpoint_root),
                                 device=device, device_ids=(device,), rank=rank, group=group)
    except Exception as error:  # noqa: BLE001 - reported to rank 0, which refuses the session
        pipe.send(("error", f"{type(error).__name__}: {error}"))
        return
    pipe.send(("ok", "ready"))
    broadcast_parameters(group, list(session.model.parameters()))
    _serve(pipe, session, Path(checkpoint_root))


def _serve(pipe: Connection, session: Any, checkpoint_root: Path) -> None:
    handlers = _handlers(session, checkpoint_root)
    while True:
        try:
            command, args = pipe.recv()
        except (EOFError, OSError):
            return
        if command == "close":
            return
        try:
            pipe.send(("ok", handlers[command](*args)))
        except Exception as error:  # noqa: BLE001 - rank 0 raises it as ReplicaError
            pipe.send(("error", f"{type(error).__name__}: {error}"))


def _handlers(session: Any, checkpoint_root: Path) -> dict[str, Callable[..., Any]]:
    from opentinker_trainer.checkpointing import load_checkpoint

    return {
        "forward_backward": session.accumulate_shard,
        "optim_step": session.apply_update,
        "rng_state": lambda: session.rng_state,
        "parameters_digest": session.parameters_digest,
        "load_checkpoint": lambda checkpoint_id, weights_only=False: load_checkpoint(
            session, checkpoint_root, checkpoint_id, weights_only=weights_only),
    }
