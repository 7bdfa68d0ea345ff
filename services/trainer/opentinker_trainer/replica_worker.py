"""The process of one data-parallel replica (rank >= 1): builds its TrainingSession, joins the
session's gloo group, then answers rank 0's commands until told to close or its connection
breaks (rank 0's process died).

A replica on rank 0's host is spawned by rank 0 and talks over a pipe (`serve_replica`); one on
another host is spawned by that host's Trainer (StartReplicas) and connects to rank 0 over TCP,
both ends proving they know the session's authkey, then receives the session to build
(`serve_remote_replica`)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

from opentinker_trainer.config import SessionSpec

HELLO = "hello"


class ByValue:
    """A Connection to a process on another host, whose messages are pickled by value.

    multiprocessing's own pickler (torch registers its reductions there) hands a tensor's storage
    over as a file descriptor, fetched back from the sending process with that process's
    authkey: that works between a Trainer and the replicas it spawned, never across hosts."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def send(self, obj: Any) -> None:
        self.connection.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def recv(self) -> Any:
        return pickle.loads(self.connection.recv_bytes())

    def poll(self, timeout: float | None = 0.0) -> bool:
        return self.connection.poll(timeout)

    def fileno(self) -> int:
        return self.connection.fileno()

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> ByValue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, kw_only=True)
class RankPlace:
    """Where one replica runs and how it reaches its group."""

    rank: int
    world_size: int
    device: str
    store_address: str
    """host:port of rank 0's TCPStore."""
    host: str = "127.0.0.1"
    """This host's address: the interface its gloo traffic uses."""
    timeout_s: float = 600.0
    """Its collectives' timeout (`collectives.DEFAULT_COLLECTIVE_TIMEOUT_S`, or the Trainer's setting)."""


def serve_replica(pipe: Connection | ByValue, spec: SessionSpec, checkpoint_root: str, place: RankPlace,
                  share_prefixes: bool = True) -> None:
    from opentinker_runtime.core.torch_threads import resolve_torch_threads, set_torch_threads
    from opentinker_runtime.ml.models import quiet_transformers
    from opentinker_trainer import shared_prefix
    from opentinker_trainer.collectives import broadcast_parameters, join_group
    from opentinker_trainer.session_loading import load_rank_session

    set_torch_threads(resolve_torch_threads(0).threads)  # rank 0's count: it exported OMP_NUM_THREADS
    shared_prefix.set_enabled(share_prefixes)
    quiet_transformers()
    group = join_group(place.store_address, place.rank, place.world_size, place.host, place.timeout_s)
    try:
        session = load_rank_session(f"replica-{place.rank}", spec, checkpoint_root=Path(checkpoint_root),
                                    device=place.device, device_ids=(place.device,), rank=place.rank, group=group)
    except Exception as error:  # noqa: BLE001 - reported to rank 0, which refuses the session
        pipe.send(("error", f"{type(error).__name__}: {error}"))
        return
    pipe.send(("ok", "ready"))
    broadcast_parameters(group, list(session.model.parameters()))
    _serve(pipe, session, Path(checkpoint_root))


def serve_remote_replica(command_address: str, authkey: bytes, checkpoint_root: str, place: RankPlace) -> None:
    """A replica on another host than rank 0's: connect to rank 0's command listener, say which
    rank this is, take the session's spec (and whether it shares prefixes), then serve as a
    local replica does. Returns when the connection fails or rank 0 closes it."""
    host, _, port = command_address.rpartition(":")
    try:
        connection = ByValue(Client((host, int(port)), authkey=authkey))
    except (OSError, EOFError):
        return  # rank 0 is gone (or gave up waiting): nothing to serve
    with connection:
        connection.send((HELLO, place.rank))
        try:
            spec, share_prefixes = connection.recv()
        except (EOFError, OSError):
            return
        serve_replica(connection, spec, checkpoint_root, place, share_prefixes)


def _serve(pipe: Connection | ByValue, session: Any, checkpoint_root: Path) -> None:
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
