"""Reading a job's assignments (GetJob): which worker of a role is the job's first, and which
hold the rest of a request leased across workers (a data-parallel session's other ranks)."""

from __future__ import annotations

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2


def role_assignments(job: job_pb2.Job, role: int) -> list[job_pb2.Assignment]:
    """The job's assignments of `role`, the one with the most devices first, ties by worker id
    (a data-parallel session's rank 0 holds the most ranks on its own host)."""
    return sorted((a for a in job.assignments if a.role == role), key=lambda a: (-len(a.device_ids), a.worker_id))


def replica_peers(assignments: list[job_pb2.Assignment]) -> list[trainer_service_pb2.ReplicaPeer]:
    """CreateSessionRequest.peers: every Trainer assignment after the first (`role_assignments`)."""
    return [trainer_service_pb2.ReplicaPeer(address=a.address, device_ids=list(a.device_ids), lease=a.lease)
            for a in assignments[1:]]
