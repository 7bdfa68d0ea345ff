"""The scheduler's domain types: jobs, workers, leases. No grpc, no protobuf.

Enum member names equal the protobuf value names without their prefix (`JobState.QUEUED` is
`Job.STATE_QUEUED`), so `convert.py` maps them by name. Times are integer milliseconds since the
Unix epoch (0 = unset), taken from the scheduler's `Clock`.

The job's spec is kept as `spec_blob`: the deterministic protobuf serialization of the JobSpec the
user sent, opaque to the domain. The scheduler reasons only about the few spec facts it needs
(type, priority, resources: `JobSpecFacts`); storing the blob returns every other field exactly as
submitted (and lets idempotent retries compare specs) without a domain twin of ~40 nested messages
that only the Coordinator, Trainer and Rollout interpret.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Generic, TypeVar


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
    """`device_count` devices of one kind on ONE worker of `role`."""

    role: Role
    device_count: int = 1
    device_kind: DeviceKind = DeviceKind.UNSPECIFIED
    min_memory_bytes: int = 0


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
class NumericField:
    """One numeric value set somewhere in a spec, with its field path (`spec.training.batch_size`)."""

    path: str
    value: float


@dataclass(frozen=True, kw_only=True)
class PathField:
    """A file path set somewhere in a spec: `kind` is output, dataset, model or config (a game config
    entry whose key ends in 'path'); a tenant key's must stay inside its tenant area."""

    path: str
    kind: str
    value: str


@dataclass(frozen=True, kw_only=True)
class LossFacts:
    """What validation needs to know about an agent's LossConfig. Enum values are the protobuf
    value names without their prefix, "" when unspecified; the band as sent (0 = default)."""

    function: str = ""
    importance_mask: str = ""
    importance_mask_low: float = 0.0
    importance_mask_high: float = 0.0


@dataclass(frozen=True, kw_only=True)
class AgentFacts:
    """What validation needs to know about one AgentSpec (`spec.policy` or `spec.agents[i]`)."""

    path: str
    agent_id: str = ""
    has_model: bool = False
    builtin_model: str = ""
    """model.builtin.name ("" for other model sources)."""
    checkpoint_id: str = ""
    """model.checkpoint.checkpoint_id ("" for other model sources)."""
    has_adaptation: bool = False
    frozen: bool = False
    learning_rate: float = 0.0
    loss: LossFacts = field(default_factory=LossFacts)


@dataclass(frozen=True, kw_only=True)
class JobSpecFacts:
    """The parts of a JobSpec the scheduler validates and schedules on."""

    type: JobType
    priority: int = 0
    policy: AgentFacts | None = None
    agents: tuple[AgentFacts, ...] = ()
    env_name: str = ""
    dataset_path: str = ""
    path_fields: tuple[PathField, ...] = ()
    """Every file path the spec sets (output, dataset, local models, game config paths)."""
    checkpoint_refs: tuple[tuple[str, str], ...] = ()
    """(field path, checkpoint id) of every model.checkpoint the spec names."""
    total_steps: int = 0
    batch_size: int = 0
    group_size: int = 0
    target_loss: float = 0.0
    max_retries: int | None = None
    """None when the spec leaves it unset (the default applies)."""
    resources: tuple[ResourceRequest, ...] = ()
    numbers: tuple[NumericField, ...] = ()
    label_count: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    display_name: str = ""
    unknown_enums: tuple[str, ...] = ()
    """'<path>: <n> is not a known <Enum> value' for each enum number our protos do not define."""
    output_path: str = ""
    multi_agent_set: bool = False
    """spec.multi_agent is set."""
    envhost_fields: tuple[EnvHostField, ...] = ()
    """Every EnvHost a spec's environments name (envhost_address or envhost), wherever they sit."""
    environments: tuple[EnvironmentFacts, ...] = ()
    """Every EnvironmentReference the spec sets (spec.environment, spec.multi_agent.eval_environment)."""
    max_staleness: int = 0
    """spec.async.max_staleness: 0 = synchronous."""
    sections: frozenset[str] = frozenset()
    """The spec's top-level message fields that are set (`environment`, `training`, `async`...)."""


@dataclass(frozen=True, kw_only=True)
class LeaseContext:
    job_id: str
    lease_id: str
    fencing_token: int


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
