"""Data-parallel training: a session replicated on several devices of this worker.

Rank 0 is the session in the Trainer process; ranks 1..N-1 are `replica_worker` processes,
each with a TrainingSession built from the same spec. All ranks join one gloo process group
of their own (a TCPStore on a free port), so several data-parallel sessions can live in one
Trainer. At start rank 0 broadcasts its parameters, so every replica begins identical.

ForwardBackward splits the datums over the ranks (balanced by tokens); every rank divides by
the whole batch's denominators, so the sum of the ranks' gradients is the gradient of the
batch. OptimStep sums the gradients over the group (`all_reduce_gradients`), then every rank
clips and steps alike: the replicas stay identical. Commands go to the workers over pipes,
results come back the same way; a worker that fails or dies raises ReplicaError.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch.distributed as dist

from opentinker_trainer import shared_prefix
from opentinker_trainer.config import SessionSpec
from opentinker_trainer.collectives import COLLECTIVE_TIMEOUT, ReplicaError
from opentinker_trainer.replica_worker import serve_replica

START_TIMEOUT_S = 300.0


class ReplicaGroup:
    """Rank 0's handle on ranks 1..N-1: their processes, pipes and the shared gloo group."""

    def __init__(self, spec: SessionSpec, *, devices: Sequence[str], checkpoint_root: Path) -> None:
        self.world_size = len(devices)
        store = dist.TCPStore("127.0.0.1", 0, self.world_size, is_master=True,
                              timeout=COLLECTIVE_TIMEOUT, wait_for_workers=False)
        self._store = store  # the group's rendezvous lives as long as the group
        context = multiprocessing.get_context("spawn")
        self._pipes: list[Connection] = []
        self._processes = []
        for rank in range(1, self.world_size):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=serve_replica, name=f"opentinker-replica-{rank}", daemon=True,
                args=(theirs, spec, str(checkpoint_root), devices[rank], rank, self.world_size,
                      store.port, shared_prefix.enabled()))
            process.start()
            theirs.close()
            self._pipes.append(ours)
            self._processes.append(process)
        try:
            self.group = dist.ProcessGroupGloo(store, 0, self.world_size, COLLECTIVE_TIMEOUT)
            for rank in range(1, self.world_size):
                self._receive(rank, timeout=START_TIMEOUT_S)  # "ready": the replica is built
        except Exception:
            self.close()
            raise

    def send(self, rank: int, command: str, *args: Any) -> None:
        try:
            self._pipes[rank - 1].send((command, args))
        except (BrokenPipeError, OSError) as error:
            raise ReplicaError(f"replica {rank} is gone: {error}") from error

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
        pipe = self._pipes[rank - 1]
        try:
            if timeout is not None and not pipe.poll(timeout):
                raise ReplicaError(f"replica {rank} did not answer within {timeout:.0f} s")
            status, value = pipe.recv()
        except (EOFError, OSError) as error:
            code = self._processes[rank - 1].exitcode
            raise ReplicaError(f"replica {rank} died (exit code {code})") from error
        if status == "error":
            raise ReplicaError(f"replica {rank} failed: {value}")
        return value

    def close(self) -> None:
        """Ask every worker to exit; kill any that does not within a few seconds."""
        for rank in range(1, self.world_size):
            try:
                self.send(rank, "close")
            except ReplicaError:
                pass
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
        for pipe in self._pipes:
            pipe.close()
