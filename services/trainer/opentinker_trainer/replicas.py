"""Data-parallel training: a session replicated on several devices, of this worker or of others.

Rank 0 is the session in the Trainer process. Ranks on this worker's further devices are
`replica_worker` processes it spawns, fed over pipes. Ranks on other Trainer workers (other
hosts: the job's lease spans workers) are spawned there by that Trainer (StartReplicas, asked
through `RemoteRanks.start`); each connects back to rank 0's command listener over TCP, both
ends proving they know the session's random authkey, and is fed over that connection. All ranks
join one gloo process group of their own (a TCPStore on a free port of rank 0's host), so several
data-parallel sessions can live in one Trainer. At start rank 0 broadcasts its parameters, so
every replica begins identical.

ForwardBackward splits the datums over the ranks (balanced by tokens); every rank divides by
the whole batch's denominators, so the sum of the ranks' gradients is the gradient of the
batch. OptimStep sums the gradients over the group (`all_reduce_gradients`), then every rank
clips and steps alike: the replicas stay identical. A replica that fails, dies or loses its
connection raises ReplicaError.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

import structlog
import torch.distributed as dist

from opentinker_trainer import shared_prefix
from opentinker_trainer.config import SessionSpec
from opentinker_trainer.collectives import (DEFAULT_COLLECTIVE_TIMEOUT_S, FORM_TIMEOUT_S, LOOPBACK, ReplicaError,
                                            gloo_group, timedelta)
from opentinker_trainer.replica_worker import HELLO, ByValue, RankPlace, serve_replica

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 300.0
CONNECT_TIMEOUT_S = 120.0
"""How long rank 0 waits for every rank on other hosts to connect once their Trainers said yes."""


@dataclass(frozen=True, kw_only=True)
class ReplicaInvite:
    """What a Trainer on another host needs to start ranks of a session (StartReplicas)."""

    first_rank: int
    world_size: int
    store_address: str
    command_address: str
    authkey: bytes


@dataclass(frozen=True, kw_only=True)
class RemoteRanks:
    """The session's devices on other Trainer workers, and how to ask each to start its ranks."""

    host: str
    """This host's reachable address: rank 0's rendezvous, command listener and gloo interface."""
    peers: Sequence[Any]
    """`ReplicaPeer`s (address, device_ids, lease), their ranks following this worker's in order."""
    start: Callable[[Any, ReplicaInvite], None]
    """Asks one peer to start its ranks; raises (a DomainError) when it refuses."""


class ReplicaGroup:
    """Rank 0's handle on ranks 1..N-1: their connections, local processes and the gloo group."""

    def __init__(self, spec: SessionSpec, *, devices: Sequence[str], checkpoint_root: Path,
                 remote: RemoteRanks | None = None, timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S) -> None:
        """`timeout_s`: how long any rank waits in a collective (the Trainer's collective timeout)."""
        peers = list(remote.peers) if remote else []
        self.timeout_s = timeout_s
        self.world_size = len(devices) + sum(len(peer.device_ids) for peer in peers)
        host = remote.host if peers and remote else LOOPBACK
        store = dist.TCPStore(host, 0, self.world_size, is_master=True,
                              timeout=timedelta(max(timeout_s, FORM_TIMEOUT_S)), wait_for_workers=False)
        self._store = store  # the group's rendezvous lives as long as the group
        self._connections: dict[int, Connection | ByValue] = {}
        self._processes: dict[int, Any] = {}
        self._where: dict[int, str] = {}
        try:
            self._spawn_local(spec, devices, checkpoint_root, f"{host}:{store.port}", host)
            if peers and remote:
                self._start_remote(spec, remote, peers, len(devices), f"{host}:{store.port}")
            self.group = gloo_group(store, 0, self.world_size, host, timeout_s)
            for rank in range(1, self.world_size):
                self._receive(rank, timeout=START_TIMEOUT_S)  # "ready": the replica is built
        except Exception:
            self.close()
            raise

    def _spawn_local(self, spec: SessionSpec, devices: Sequence[str], checkpoint_root: Path,
                     store_address: str, host: str) -> None:
        context = multiprocessing.get_context("spawn")
        for rank in range(1, len(devices)):
            ours, theirs = context.Pipe()
            place = RankPlace(rank=rank, world_size=self.world_size, device=devices[rank],
                              store_address=store_address, host=host, timeout_s=self.timeout_s)
            process = context.Process(target=serve_replica, name=f"opentinker-replica-{rank}", daemon=True,
                                      args=(theirs, spec, str(checkpoint_root), place, shared_prefix.enabled()))
            process.start()
            theirs.close()
            self._connections[rank] = ours
            self._processes[rank] = process
            self._where[rank] = "this host"

    def _start_remote(self, spec: SessionSpec, remote: RemoteRanks, peers: Sequence[Any], first: int,
                      store_address: str) -> None:
        """Ask each peer Trainer to start its ranks, then take their connections (each sent the
        spec to build) before the group forms."""
        authkey = secrets.token_bytes(32)
        with Listener((remote.host, 0), authkey=authkey) as listener:
            command_address = f"{remote.host}:{listener.address[1]}"
            expected: dict[int, str] = {}
            for peer in peers:
                invite = ReplicaInvite(first_rank=first, world_size=self.world_size, store_address=store_address,
                                       command_address=command_address, authkey=authkey)
                remote.start(peer, invite)
                for rank in range(first, first + len(peer.device_ids)):
                    expected[rank] = peer.address
                first += len(peer.device_ids)
            self._where.update(expected)
            self._connections.update(_accept_ranks(listener, expected, CONNECT_TIMEOUT_S))
        for connection in (self._connections[rank] for rank in expected):
            connection.send((spec, shared_prefix.enabled()))

    @property
    def local_processes(self) -> list[Any]:
        """The processes of the ranks on this host (those on other hosts are their Trainers')."""
        return list(self._processes.values())

    def send(self, rank: int, command: str, *args: Any) -> None:
        try:
            self._connections[rank].send((command, args))
        except (BrokenPipeError, OSError) as error:
            raise ReplicaError(f"replica {rank} ({self._where.get(rank, '?')}) is gone: {error}") from error

    def send_all(self, command: str, *args: Any) -> None:
        for rank in range(1, self.world_size):
            self.send(rank, command, *args)

    def receive_all(self) -> list[Any]:
        """Each worker's answer to the last command, ranks 1..N-1 in order."""
        return [self._receive(rank) for rank in range(1, self.world_size)]

    def call_all(self, command: str, *args: Any) -> list[Any]:
        self.send_all(command, *args)
        return self.receive_all()

    def _receive(self, rank: int, timeout: float | None = None) -> Any:
        connection = self._connections[rank]
        where = self._where.get(rank, "?")
        try:
            if timeout is not None and not connection.poll(timeout):
                raise ReplicaError(f"replica {rank} ({where}) did not answer within {timeout:.0f} s")
            status, value = connection.recv()
        except (EOFError, OSError) as error:
            process = self._processes.get(rank)
            how = f"exit code {process.exitcode}" if process is not None else "its connection closed"
            raise ReplicaError(f"replica {rank} ({where}) died ({how})") from error
        if status == "error":
            raise ReplicaError(f"replica {rank} ({where}) failed: {value}")
        return value

    def drain(self, timeout_s: float) -> None:
        """After rank 0 failed a command: take each replica's answer to it (whatever it is),
        giving them `timeout_s` in all; a replica silent that long has its link broken
        (`abort`), so no later call waits on it."""
        deadline = time.monotonic() + timeout_s
        for rank in range(1, self.world_size):
            try:
                self._receive(rank, timeout=max(0.0, deadline - time.monotonic()))
            except ReplicaError:
                if time.monotonic() >= deadline:
                    self.abort()
                    return

    def abort(self) -> None:
        """Break every replica's command link, from any thread: a call waiting for a replica's
        answer (one on a host cut off from this one would never come) fails at once with
        ReplicaError. A wait inside a gloo collective still lasts until its timeout."""
        for connection in self._connections.values():
            try:
                with socket.socket(fileno=os.dup(connection.fileno())) as link:
                    link.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed already

    def close(self) -> None:
        """Ask every replica to exit; kill any local one that does not within a few seconds
        (one on another host exits when its connection closes)."""
        for rank in list(self._connections):
            try:
                self.send(rank, "close")
            except ReplicaError:
                pass
        for process in self._processes.values():
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
        for connection in self._connections.values():
            connection.close()


def _accept_ranks(listener: Listener, expected: dict[int, str], timeout: float) -> dict[int, ByValue]:
    """The connections of the `expected` ranks (rank -> peer address), each having said which
    rank it is; ReplicaError when they are not all there within `timeout`. A caller without the
    authkey, or one naming a rank not expected (or twice), is turned away."""
    connected: dict[int, ByValue] = {}
    done = threading.Event()

    def accept() -> None:
        while len(connected) < len(expected):
            try:
                connection = ByValue(listener.accept())
            except multiprocessing.AuthenticationError as error:
                log.warning("replica_connection_refused", why=str(error))
                continue
            except OSError:
                return  # the listener closed: timed out
            rank = _hello(connection)
            if rank in expected and rank not in connected:
                connected[rank] = connection
            else:
                log.warning("replica_connection_refused", why=f"unexpected rank {rank!r}")
                connection.close()
        done.set()

    thread = threading.Thread(target=accept, name="opentinker-replica-accept", daemon=True)
    thread.start()
    if not done.wait(timeout):
        listener.close()
        thread.join(timeout=5)
        for connection in connected.values():
            connection.close()
        missing = {rank: address for rank, address in expected.items() if rank not in connected}
        raise ReplicaError(f"ranks {sorted(missing)} on {sorted(set(missing.values()))} did not connect "
                           f"within {timeout:.0f} s")
    return connected


def _hello(connection: ByValue) -> int | None:
    try:
        if not connection.poll(10):
            return None
        kind, rank = connection.recv()
    except (EOFError, OSError, ValueError, TypeError, pickle.UnpicklingError):
        return None
    return rank if kind == HELLO and isinstance(rank, int) else None
