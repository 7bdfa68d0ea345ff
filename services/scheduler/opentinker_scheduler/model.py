"""The scheduler's domain types: jobs, workers, leases. No grpc, no protobuf.

Enum member names equal the protobuf value names without their prefix (`JobState.QUEUED` is
`Job.STATE_QUEUED`), so `convert.py` maps them by name. Times are integer milliseconds since the
Unix epoch (0 = unset), taken from the scheduler's `Clock`.

The job's spec is kept as `spec_blob`: the deterministic protobuf serialization of the JobSpec the
user sent, opaque to the domain. The scheduler reasons on its resolved plan (`JobSpecFacts.plan`,
the same `opentinker_runtime.jobplan.JobPlan` a Coordinator drives the job by); storing the blob
returns every field exactly as submitted (and lets idempotent retries compare specs).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from opentinker_runtime.edge.lease import LeaseContext
from opentinker_runtime.jobplan.plan import JobPlan
from opentinker_scheduler.errors import InvalidArgument


class JobType(enum.StrEnum):
    UNSPECIFIED = "UNSPECIFIED"
    RL = "RL"
    SFT = "SFT"
    INFERENCE = "INFERENCE"
    SESSION = "SESSION"
    """A client's interactive training session, driven step by step by a gateway worker."""


class JobState(enum.StrEnum):
    UNSPECIFIED = "UNSPECIFIED"
    QUEUED = "QUEUED"
    ALLOCATING = "ALLOCATING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class Role(enum.StrEnum):
    UNSPECIFIED = "UNSPECIFIED"
    TRAINER = "TRAINER"
    ROLLOUT = "ROLLOUT"
    ENVHOST = "ENVHOST"
    COORDINATOR = "COORDINATOR"
    GATEWAY = "GATEWAY"
    """The Tinker-compatible HTTP gateway: drives SESSION jobs as a Coordinator drives the others."""


class DeviceKind(enum.StrEnum):
    UNSPECIFIED = "UNSPECIFIED"  # in a request: any kind
    CPU = "CPU"
    CUDA = "CUDA"


class WorkerState(enum.StrEnum):
    UNSPECIFIED = "UNSPECIFIED"
    ALIVE = "ALIVE"
    DRAINING = "DRAINING"
    DEAD = "DEAD"


@dataclass(frozen=True, kw_only=True)
class ResourceRequest:
    """`device_count` devices of one kind on ONE worker of `role`; `shared`: a share of one
    device that other shared requests may hold too (a LoRA job's, `spec_facts.resource_requests`)."""

    role: Role
    device_count: int = 1
    device_kind: DeviceKind = DeviceKind.UNSPECIFIED
    min_memory_bytes: int = 0
    shared: bool = False
    model_keys: tuple[str, ...] = ()
    """The bases (`ModelSource.model_key`) of a shared request's job: placed where one is resident."""


@dataclass(frozen=True, kw_only=True)
class EnvHostField:
    """Where an EnvironmentReference of a spec says its EnvHost is: `envhost_address` (a raw
    host:port, admin keys only) or `envhost` (a registered EnvHost's id or name)."""

    path: str
    kind: str
    value: str


@dataclass(frozen=True, kw_only=True)
class EnvironmentFacts:
    """One EnvironmentReference of a spec (`path`): the game and where the job says it is served."""

    path: str
    env_name: str
    envhost: str = ""
    envhost_address: str = ""


@dataclass(frozen=True, kw_only=True)
class PathField:
    """A file path set somewhere in a spec: `kind` is output, dataset, model or config (a game config
    entry whose key ends in 'path'); a tenant key's must stay inside its tenant area."""

    path: str
    kind: str
    value: str


@dataclass(frozen=True, kw_only=True)
class JobSpecFacts:
    """A submitted spec: its resolved plan (`opentinker_runtime.jobplan`: every rule of the spec
    checked, every default applied) and what the Scheduler checks of it against its own state and
    the caller (`spec_facts`). A spec that did not resolve has no plan, only its `problem`."""

    plan: JobPlan | None
    problem: InvalidArgument | None = None
    """Why the spec does not resolve (raised after the caller's right to its EnvHost addresses is judged)."""
    envhost_fields: tuple[EnvHostField, ...] = ()
    """Every EnvHost a spec's environments name (envhost_address or envhost), wherever they sit."""
    path_fields: tuple[PathField, ...] = ()
    """Every file path the spec sets (output, dataset, local models, game config paths)."""
    checkpoint_refs: tuple[tuple[str, str], ...] = ()
    """(field path, checkpoint id) of every model.checkpoint the spec names."""
    environments: tuple[EnvironmentFacts, ...] = ()
    """Every EnvironmentReference the spec sets (spec.environment, spec.multi_agent.eval_environment)."""
    resources: tuple[ResourceRequest, ...] = ()
    """The devices it asks for, the job type's default when the spec names none."""

    def raise_problem(self) -> None:
        if self.problem is not None:
            raise self.problem

    @property
    def type(self) -> JobType:
        return JobType(self.plan.kind)


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """A worker bound to a job for one role."""

    role: Role
    worker_id: str
    address: str
    device_ids: tuple[str, ...]
    lease: LeaseContext


@dataclass(frozen=True, kw_only=True)
class Progress:
    phase: str = "UNSPECIFIED"
    step: int = 0
    total_steps: int = 0
    phase_done: int = 0
    phase_total: int = 0
    last_checkpoint_id: str = ""
    update_time_ms: int = 0
    latest_metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CheckpointRef:
    """A checkpoint a job reported; a re-queued attempt resumes from the last one."""

    checkpoint_id: str
    step: int = 0
    agent_checkpoint_ids: dict[str, str] = field(default_factory=dict)
    """Multi-agent jobs: each learning agent's checkpoint (the job's common checkpoint)."""
    driver_state: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Job:
    job_id: str
    tenant_id: str
    type: JobType
    priority: int
    spec_blob: bytes
    resources: tuple[ResourceRequest, ...]
    state: JobState
    create_time_ms: int
    update_time_ms: int
    start_time_ms: int = 0
    end_time_ms: int = 0
    progress: Progress = field(default_factory=Progress)
    status_message: str = ""
    queue_position: int = 0
    attempt: int = 0
    assignments: tuple[Assignment, ...] = ()
    last_event_sequence: int = 0
    cancel_requested: bool = False
    retries_left: int = 0
    resume_from: CheckpointRef | None = None
    job_token_nonce: str = ""
    """The current attempt's job token nonce ("" when no attempt runs); see `job_tokens`."""


@dataclass(frozen=True, kw_only=True)
class LeasedJob:
    """What a worker's heartbeat needs of the job a lease of it serves (read without its spec)."""

    job_id: str
    state: JobState
    assignments: tuple[Assignment, ...] = ()
    cancel_requested: bool = False
    job_token_nonce: str = ""


@dataclass(frozen=True, kw_only=True)
class Device:
    device_id: str
    kind: DeviceKind = DeviceKind.CPU
    memory_bytes: int = 0
    name: str = ""
    shares: int = 0
    """How many shared requests may hold a share of it at once; 0 or 1: leased whole only."""


@dataclass(frozen=True, kw_only=True)
class Lease:
    """Slots of one worker held by one job. For workers without devices (a Coordinator) the
    slots are capacity slots `slot:N` and `device_ids` is empty."""

    lease_id: str
    job_id: str
    worker_id: str
    role: Role
    slots: tuple[str, ...]
    device_ids: tuple[str, ...]
    fencing_token: int
    expire_time_ms: int


@dataclass(frozen=True, kw_only=True)
class WorkerRegistration:
    worker_id: str
    role: Role
    address: str
    devices: tuple[Device, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    version: str = ""
    name: str = ""
    """ROLE_ENVHOST: the name jobs may give in EnvironmentReference.envhost."""
    tenant_id: str = ""
    """The tenant that registered it with a tenant key; "" = the stack's own (an admin key)."""


@dataclass(frozen=True, kw_only=True)
class ResidentModel:
    """A base model held on one device of a worker, and the jobs whose adapters stand on it."""

    device_id: str
    model_key: str
    job_ids: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Worker:
    worker_id: str
    role: Role
    address: str
    devices: tuple[Device, ...]
    state: WorkerState
    register_time_ms: int
    last_heartbeat_time_ms: int
    heartbeat_ttl_ms: int
    draining: bool = False
    leases: tuple[Lease, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    version: str = ""
    name: str = ""
    tenant_id: str = ""
    """"" = the stack's own (registered with an admin key), shared with every tenant."""
    resident_models: tuple[ResidentModel, ...] = ()
    """What its last heartbeat said it holds (Trainer and Rollout workers)."""


@dataclass(frozen=True, kw_only=True)
class Caller:
    """Who makes a request: a tenant, and whether with an admin key. Admin keys run OpenTinker's
    own services (workers, the Coordinator) and manage tenants; tenant keys see their own jobs."""

    tenant_id: str
    admin: bool = False

    def require_admin(self, what: str) -> None:
        from opentinker_scheduler.errors import PermissionDenied

        if not self.admin:
            raise PermissionDenied(f"{what} needs an admin key; this key belongs to tenant "
                                   f"{self.tenant_id} without admin rights")


@dataclass(frozen=True, kw_only=True)
class Quota:
    """Limits of one tenant; 0 means unlimited."""

    max_devices: int = 0
    max_concurrent_jobs: int = 0
    max_queued_jobs: int = 0


@dataclass(frozen=True, kw_only=True)
class Usage:
    """What a tenant uses now: devices and jobs RUNNING, jobs QUEUED."""

    devices: int = 0
    running_jobs: int = 0
    queued_jobs: int = 0


@dataclass(frozen=True, kw_only=True)
class Tenant:
    tenant_id: str
    display_name: str = ""
    quota: Quota = field(default_factory=Quota)
    create_time_ms: int = 0
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, kw_only=True)
class QueuedJob:
    """The facts of a queued job the allocator needs (read without its spec)."""

    job_id: str
    tenant_id: str
    state: JobState
    resources: tuple[ResourceRequest, ...]
    device_count: int
    create_time_ms: int
    status_message: str = ""
    type: JobType = JobType.UNSPECIFIED
    """Which worker drives it (`placement.driver_request`): a gateway for SESSION, else a Coordinator."""


T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Page(Generic[T]):
    items: list[T]
    next_page_token: str = ""
