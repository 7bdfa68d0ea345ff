"""The data-parallel ranks this Trainer runs for sessions whose rank 0 is on another Trainer
(the job's lease spans workers; `replicas` is rank 0's side).

    host = ReplicaHost(checkpoint_root=root, device="cpu", host="10.0.0.3")
    host.start("job-1", [ReplicaPeer...], invite, ["cpu:0"])   # StartReplicas: one process per device
    host.stop_job("job-1")                                      # the Scheduler stopped the job here

Each process connects to rank 0's command listener (`replica_worker.serve_remote_replica`) and
ends when rank 0 closes the session, its connection breaks, or the job is stopped here.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from opentinker_trainer.collectives import DEFAULT_COLLECTIVE_TIMEOUT_S
from opentinker_trainer.replica_worker import RankPlace, serve_remote_replica
from opentinker_trainer.replicas import ReplicaInvite
from opentinker_trainer.session_loading import replica_device

log = structlog.get_logger(__name__)

STOP_GRACE_S = 5.0


@dataclass(frozen=True, kw_only=True)
class ReplicaPeer:
    """Another Trainer worker holding devices of the same job (CreateSessionRequest.peers)."""

    address: str
    device_ids: tuple[str, ...]
    lease: Any
    """Its LeaseContext of the job."""


class ReplicaHost:
    """Processes of remote-rank-0 sessions, by job."""

    def __init__(self, *, checkpoint_root: Path, device: str, host: str,
                 timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S) -> None:
        self.checkpoint_root = checkpoint_root
        self.timeout_s = timeout_s
        self.device = device
        self.host = host
        self._processes: dict[str, list[Any]] = {}

    def start(self, job_id: str, invite: ReplicaInvite, device_ids: Sequence[str]) -> int:
        """Start ranks first_rank.. on `device_ids` (checked devices of this worker); how many."""
        self._forget_ended()
        context = multiprocessing.get_context("spawn")
        for index, device_id in enumerate(device_ids):
            place = RankPlace(rank=invite.first_rank + index, world_size=invite.world_size,
                              device=replica_device(self.device, device_id), store_address=invite.store_address,
                              host=self.host, timeout_s=self.timeout_s)
            process = context.Process(target=serve_remote_replica, name=f"opentinker-replica-{place.rank}",
                                      daemon=True, args=(invite.command_address, invite.authkey,
                                                         str(self.checkpoint_root), place))
            process.start()
            self._processes.setdefault(job_id, []).append(process)
        log.info("replicas_started", job_id=job_id[:128], first_rank=invite.first_rank,
                 world_size=invite.world_size, device_ids=list(device_ids))
        return len(device_ids)

    def running(self, job_id: str) -> int:
        return sum(process.is_alive() for process in self._processes.get(job_id, []))

    def stop_job(self, job_id: str) -> int:
        """Stop the job's replicas here (the Scheduler no longer runs it on this worker); how many
        were still running."""
        processes = self._processes.pop(job_id, [])
        alive = [process for process in processes if process.is_alive()]
        for process in alive:
            process.terminate()
        for process in alive:
            process.join(timeout=STOP_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join()
        if alive:
            log.info("replicas_stopped", job_id=job_id[:128], replicas=len(alive))
        return len(alive)

    def close_all(self) -> None:
        for job_id in list(self._processes):
            self.stop_job(job_id)

    def _forget_ended(self) -> None:
        for job_id, processes in list(self._processes.items()):
            left = [process for process in processes if process.is_alive()]
            if left:
                self._processes[job_id] = left
            else:
                del self._processes[job_id]
