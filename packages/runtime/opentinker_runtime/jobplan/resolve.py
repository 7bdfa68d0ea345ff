"""`resolve_job_plan`: a JobSpec checked and turned into a JobPlan, every default applied.

The one place a JobSpec is read. The Scheduler resolves each submitted spec (a ResolveError is
INVALID_ARGUMENT naming the field) and the Coordinator the spec of each job it drives; both get
the same plan. The first problem found is raised: set scalars first (known enums, finite and
non-negative numbers), then the job type's rules in field order, then each section as it is
resolved.
"""

from __future__ import annotations

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.jobplan import bounds, defaults
from opentinker_runtime.jobplan.errors import ResolveError
from opentinker_runtime.jobplan.names import enum_name
from opentinker_runtime.jobplan.plan import DeviceKind, JobKind, JobPlan, PolicyPlan, ResourcePlan, Role
from opentinker_runtime.jobplan.resolve_environment import environment_plan, multi_agent_plan
from opentinker_runtime.jobplan.resolve_policy import check_policy, policy_plan
from opentinker_runtime.jobplan.resolve_training import (
    async_plan,
    check_async,
    check_session_training,
    check_training,
    dataset_plan,
    inference_plan,
    training_plan,
)
from opentinker_runtime.jobplan.scalars import check_enums, check_numbers, check_struct_numbers, set_scalars

LEARNING_KINDS = (JobKind.RL, JobKind.SFT)
EPISODE_KINDS = (JobKind.RL, JobKind.INFERENCE)
LEASABLE_ROLES = (resources_pb2.ROLE_TRAINER, resources_pb2.ROLE_ROLLOUT)
SESSION_REFUSED_SECTIONS = {
    "environment": "a SESSION job plays no episodes of its own: its client samples through the gateway",
    "dataset": "a SESSION job reads no dataset: its client sends the data of each step",
    "inference": "a SESSION job writes no episode output",
    "multi_agent": "a SESSION job trains one policy (spec.policy)",
    "async": "a SESSION job's client decides how its sampling overlaps its training",
}
"""Spec sections a SESSION job refuses, with why."""


def resolve_job_plan(spec: job_pb2.JobSpec, *, job_id: str = "") -> JobPlan:
    """The plan of `spec`, or ResolveError naming the first problem's field. `job_id` names an
    INFERENCE job's default output file (left "" while the job has no id)."""
    kind = check_spec(spec)
    training = training_plan(spec.training, kind)
    policies = tuple(_policies(spec, kind, training.total_steps))
    return JobPlan(
        kind=kind, display_name=spec.display_name, priority=spec.priority or defaults.PRIORITY,
        policy=None if spec.agents else policies[0], agents=policies if spec.agents else (),
        environment=environment_plan(spec.environment, "spec.environment") if spec.HasField("environment") else None,
        training=training, resources=resource_plans(spec.resources) or defaults.RESOURCES[kind],
        dataset=dataset_plan(spec.dataset) if spec.HasField("dataset") else None,
        inference=inference_plan(spec.inference, job_id) if kind is JobKind.INFERENCE else None,
        labels=dict(spec.labels), multi_agent=multi_agent_plan(spec.multi_agent) if spec.agents else None,
        asynchrony=async_plan(getattr(spec, "async")))  # `async` is a Python keyword


def check_spec(spec: job_pb2.JobSpec) -> JobKind:
    """Every rule across the spec's sections; the job's kind."""
    check_struct_numbers(spec, "spec")
    kind = job_kind(spec.type)
    scalars = tuple(set_scalars(spec, "spec"))
    check_enums(scalars)
    check_numbers(scalars)
    _check_header(spec)
    _check_policies(spec, kind)
    if spec.HasField("multi_agent") and not spec.agents:
        raise ResolveError("spec.multi_agent", "only multi-agent jobs (spec.agents) use it")
    if kind is JobKind.SESSION:
        _check_session(spec)
    _check_sections(spec, kind)
    check_async(getattr(spec, "async"), kind)
    for index, request in enumerate(spec.resources):
        _check_resource(f"spec.resources[{index}]", request)
    _check_labels(spec)
    return kind


def job_kind(value: int) -> JobKind:
    if value not in job_pb2.JobType.values():
        raise ResolveError("spec.type", f"{value} is not a known JobType value")
    if value == job_pb2.JOB_TYPE_UNSPECIFIED:
        raise ResolveError("spec.type", "must be set (JOB_TYPE_RL, JOB_TYPE_SFT, JOB_TYPE_INFERENCE or "
                           "JOB_TYPE_SESSION)")
    return JobKind(enum_name(job_pb2.JobType, value))


def _policies(spec: job_pb2.JobSpec, kind: JobKind, total_steps: int) -> list[PolicyPlan]:
    if not spec.agents:
        return [policy_plan(spec.policy, "spec.policy", kind, total_steps, frozen=False)]
    return [policy_plan(agent, f"spec.agents[{index}]", kind, total_steps, frozen=agent.frozen)
            for index, agent in enumerate(spec.agents)]


def _check_header(spec: job_pb2.JobSpec) -> None:
    if len(spec.display_name) > bounds.MAX_DISPLAY_NAME:
        raise ResolveError("spec.display_name", f"must be at most {bounds.MAX_DISPLAY_NAME} characters")
    if not 0 <= spec.priority <= bounds.MAX_PRIORITY:
        raise ResolveError("spec.priority", f"must be between 0 and {bounds.MAX_PRIORITY}, got {spec.priority}")


def _check_policies(spec: job_pb2.JobSpec, kind: JobKind) -> None:
    if spec.HasField("policy") and spec.agents:
        raise ResolveError("spec.agents", "set either spec.policy or spec.agents, not both")
    if not spec.agents:
        check_policy(spec.policy, "spec.policy", kind, frozen=False)
        return
    if kind is not JobKind.RL:
        raise ResolveError("spec.agents", f"multi-agent jobs are RL jobs; an {kind} job uses spec.policy")
    if len(spec.agents) < 2:
        raise ResolveError("spec.agents", "a multi-agent job needs at least 2 agents (one policy: use spec.policy)")
    seen: set[str] = set()
    for index, agent in enumerate(spec.agents):
        check_policy(agent, f"spec.agents[{index}]", kind, frozen=agent.frozen)
        _check_agent_id(agent.agent_id, f"spec.agents[{index}].agent_id", seen)
        seen.add(agent.agent_id)
    if all(agent.frozen for agent in spec.agents):
        raise ResolveError("spec.agents", "every agent is frozen, so nothing would train; leave at least one "
                           "agent unfrozen")


def _check_agent_id(agent_id: str, path: str, seen: set[str]) -> None:
    if not agent_id or agent_id in seen:
        raise ResolveError(path, "must be set and unique among spec.agents")
    if not bounds.AGENT_ID.match(agent_id):
        raise ResolveError(path, "must be 1-63 characters: letters, digits, '.', '_' or '-', starting with a "
                           "letter or digit")


def _check_session(spec: job_pb2.JobSpec) -> None:
    """A SESSION job is a policy its client trains step by step through the gateway: a model and
    an adaptation, nothing a Coordinator would drive, and no retries (nothing to replay)."""
    if spec.agents:
        raise ResolveError("spec.agents", "a SESSION job trains one policy: set spec.policy, not spec.agents")
    if spec.policy.adaptation.WhichOneof("kind") is None:
        raise ResolveError("spec.policy.adaptation", "must be set for a SESSION job (lora or full)")
    if spec.policy.frozen:
        raise ResolveError("spec.policy.frozen", "a SESSION job trains its policy: leave it false")
    for section, why in SESSION_REFUSED_SECTIONS.items():
        if spec.HasField(section):
            raise ResolveError(f"spec.{section}", f"must not be set for a SESSION job: {why}")
    check_session_training(spec.training)


def _check_sections(spec: job_pb2.JobSpec, kind: JobKind) -> None:
    """The sections each job type needs (or refuses)."""
    if kind in EPISODE_KINDS and not spec.environment.env_name:
        raise ResolveError("spec.environment.env_name", f"must name an environment for an {kind} job (its "
                           "episodes are played there)")
    if spec.inference.output_path and kind is not JobKind.INFERENCE:
        raise ResolveError("spec.inference.output_path", "only INFERENCE jobs write episode output")
    if kind is JobKind.SFT and not spec.dataset.path:
        raise ResolveError("spec.dataset.path", "must be set for an SFT job")
    if kind in LEARNING_KINDS:
        check_training(spec.training, kind)


def _check_resource(path: str, request: resources_pb2.ResourceRequest) -> None:
    if request.role not in LEASABLE_ROLES:
        raise ResolveError(f"{path}.role", "must be ROLE_TRAINER or ROLE_ROLLOUT (the driver's slot, a "
                           "coordinator's or for SESSION jobs a gateway's, is always added)")
    if not 1 <= request.device_count <= bounds.MAX_DEVICES_PER_REQUEST:
        raise ResolveError(f"{path}.device_count", f"must be between 1 and {bounds.MAX_DEVICES_PER_REQUEST}, "
                           f"got {request.device_count}")


def resource_plans(requests: list[resources_pb2.ResourceRequest]) -> tuple[ResourcePlan, ...]:
    return tuple(ResourcePlan(role=Role(enum_name(resources_pb2.Role, r.role)), device_count=r.device_count,
                              device_kind=DeviceKind(enum_name(resources_pb2.DeviceKind, r.device_kind)
                                                     or DeviceKind.UNSPECIFIED),
                              min_memory_bytes=r.min_memory_bytes, dedicated=r.dedicated_device) for r in requests)


def _check_labels(spec: job_pb2.JobSpec) -> None:
    if len(spec.labels) > bounds.MAX_LABELS:
        raise ResolveError("spec.labels", f"has {len(spec.labels)} entries, at most {bounds.MAX_LABELS}")
    for key, value in spec.labels.items():
        if not bounds.LABEL_KEY.match(key):
            raise ResolveError(f"spec.labels[{key!r}]", "keys must be 1-63 characters: letters, digits, '-', "
                               "'_', '.' or '/', starting with a letter or digit")
        if len(value) > bounds.MAX_LABEL_VALUE:
            raise ResolveError(f"spec.labels[{key!r}]", f"values must be at most {bounds.MAX_LABEL_VALUE} "
                               "characters")
