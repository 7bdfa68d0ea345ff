"""SubmitJob validation: every rule raises InvalidArgument naming the field path (`spec.x.y`)."""

from __future__ import annotations

import math
import re

from opentinker_scheduler.errors import InvalidArgument
from opentinker_scheduler.model import AgentFacts, JobSpecFacts, JobType, LossFacts, ResourceRequest, Role
from opentinker_scheduler.model_context import check_context_limits

MAX_PRIORITY = 100
MAX_TOTAL_STEPS = 10_000_000
MAX_BATCH_SIZE = 4096
MAX_GROUP_SIZE = 1024
MAX_DEVICES_PER_REQUEST = 64
MAX_LABELS = 32
MAX_LABEL_VALUE = 256
MAX_DISPLAY_NAME = 200
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
MAX_RETRIES = 100
DEFAULT_MAX_RETRIES = 2
MODEL_JOB_TYPES = (JobType.RL, JobType.SFT, JobType.INFERENCE, JobType.SESSION)
TRAINING_JOB_TYPES = (JobType.RL, JobType.SFT)
LEASABLE_ROLES = (Role.TRAINER, Role.ROLLOUT)
SESSION_REFUSED_SECTIONS = {
    "environment": "a SESSION job plays no episodes of its own: its client samples through the gateway",
    "dataset": "a SESSION job reads no dataset: its client sends the data of each step",
    "inference": "a SESSION job writes no episode output",
    "multi_agent": "a SESSION job trains one policy (spec.policy)",
    "async": "a SESSION job's client decides how its sampling overlaps its training",
}
"""Spec sections a SESSION job refuses, with why."""
SESSION_TRAINING_FIELDS = ("seed", "max_tokens_per_micro_batch", "max_retries")
"""The spec.training fields a SESSION job reads (max_retries only as 0: it is never retried)."""
MAX_LORA_RANK = 1024  # the Trainer's and Rollout's bound: a larger adapter is gigabytes per layer
# Fields named so must not exceed the bound (AdamW betas < 1 are checked by the Trainer).
MAX_STALENESS = 8  # spec.async.max_staleness: policy versions the Rollout may run ahead
# LossConfig.importance_mask's band when left 0 (the Trainer's defaults and rules, checked here
# too so a bad band fails at submit, not at the job's first step).
DEFAULT_IMPORTANCE_MASK_LOW, DEFAULT_IMPORTANCE_MASK_HIGH = 0.5, 2.0
UNIT_INTERVAL_FIELDS = {"top_p": 1.0, "dropout": 1.0, "beta1": 1.0, "beta2": 1.0, "gamma": 1.0,
                        "rank": MAX_LORA_RANK}


def validate_spec(facts: JobSpecFacts) -> None:
    """Raise InvalidArgument for the first problem found, in field order."""
    if facts.type is JobType.UNSPECIFIED:
        raise InvalidArgument("spec.type", "must be set (JOB_TYPE_RL, JOB_TYPE_SFT, JOB_TYPE_INFERENCE or "
                              "JOB_TYPE_SESSION)")
    for problem in facts.unknown_enums:
        path, _, rule = problem.partition(": ")
        raise InvalidArgument(path, rule)
    if len(facts.display_name) > MAX_DISPLAY_NAME:
        raise InvalidArgument("spec.display_name", f"must be at most {MAX_DISPLAY_NAME} characters")
    _check_range("spec.priority", facts.priority, 0, MAX_PRIORITY)
    if facts.type in MODEL_JOB_TYPES:
        _check_agents(facts)
    if facts.multi_agent_set and not facts.agents:
        raise InvalidArgument("spec.multi_agent", "only multi-agent jobs (spec.agents) use it")
    if facts.type in TRAINING_JOB_TYPES:
        _check_learners(facts)
    if facts.type is JobType.SESSION:
        _check_session(facts)
    if facts.type in (JobType.RL, JobType.INFERENCE) and not facts.env_name:
        raise InvalidArgument("spec.environment.env_name", f"must name an environment for an "
                              f"{facts.type} job (its episodes are played there)")
    if facts.output_path and facts.type is not JobType.INFERENCE:
        raise InvalidArgument("spec.inference.output_path", "only INFERENCE jobs write episode output")
    if facts.type is JobType.SFT and not facts.dataset_path:
        raise InvalidArgument("spec.dataset.path", "must be set for an SFT job")
    if facts.type in TRAINING_JOB_TYPES:
        _check_training(facts)
    _check_numbers(facts)
    _check_async(facts)
    for agent in (facts.policy, *facts.agents):
        if agent is not None:
            _check_importance_mask(f"{agent.path}.algorithm.loss", agent.loss, facts.type)
    for index, request in enumerate(facts.resources):
        _check_resource(f"spec.resources[{index}]", request)
    if facts.label_count > MAX_LABELS:
        raise InvalidArgument("spec.labels", f"has {facts.label_count} entries, at most {MAX_LABELS}")
    for key, value in facts.labels:
        if not LABEL_KEY.match(key):
            raise InvalidArgument(f"spec.labels[{key!r}]", "keys must be 1-63 characters: letters, digits, "
                                  "'-', '_', '.' or '/', starting with a letter or digit")
        if len(value) > MAX_LABEL_VALUE:
            raise InvalidArgument(f"spec.labels[{key!r}]", f"values must be at most {MAX_LABEL_VALUE} characters")
    check_context_limits(facts)  # builtin models; checkpoints of them: JobService.submit


def _check_agents(facts: JobSpecFacts) -> None:
    if facts.policy is not None and facts.agents:
        raise InvalidArgument("spec.agents", "set either spec.policy or spec.agents, not both")
    if not facts.agents:
        _check_agent(facts.policy or AgentFacts(path="spec.policy"))
        return
    if facts.type is not JobType.RL:
        raise InvalidArgument("spec.agents", f"multi-agent jobs are RL jobs; an {facts.type} job uses spec.policy")
    if len(facts.agents) < 2:
        raise InvalidArgument("spec.agents", "a multi-agent job needs at least 2 agents (one policy: use spec.policy)")
    seen: set[str] = set()
    for agent in facts.agents:
        _check_agent(agent)
        if not agent.agent_id or agent.agent_id in seen:
            raise InvalidArgument(f"{agent.path}.agent_id", "must be set and unique among spec.agents")
        if not AGENT_ID.match(agent.agent_id):
            raise InvalidArgument(f"{agent.path}.agent_id", "must be 1-63 characters: letters, digits, '.', '_' "
                                  "or '-', starting with a letter or digit")
        seen.add(agent.agent_id)
    if all(agent.frozen for agent in facts.agents):
        raise InvalidArgument("spec.agents", "every agent is frozen, so nothing would train; "
                              "leave at least one agent unfrozen")


def _check_agent(agent: AgentFacts) -> None:
    if not agent.has_model:
        raise InvalidArgument(f"{agent.path}.model", "must be set (local, builtin or checkpoint)")


def _check_learners(facts: JobSpecFacts) -> None:
    """Every agent that learns says how (a LoRA adapter or full parameters) and how fast."""
    for agent in (facts.policy, *facts.agents):
        if agent is None or agent.frozen:
            continue
        if not agent.has_adaptation:
            raise InvalidArgument(f"{agent.path}.adaptation", "must be set for a training job "
                                  "(lora or full)")
        if not agent.learning_rate > 0:
            raise InvalidArgument(f"{agent.path}.algorithm.optimizer.learning_rate",
                                  f"must be > 0 for a training job, got {agent.learning_rate:g}")


def _check_session(facts: JobSpecFacts) -> None:
    """A SESSION job is a policy its client trains step by step through the gateway: a model and
    an adaptation, nothing the Coordinator would drive, and no retries (nothing to replay)."""
    if facts.agents:
        raise InvalidArgument("spec.agents", "a SESSION job trains one policy: set spec.policy, not spec.agents")
    policy = facts.policy or AgentFacts(path="spec.policy")
    if not policy.has_adaptation:
        raise InvalidArgument("spec.policy.adaptation", "must be set for a SESSION job (lora or full)")
    if policy.frozen:
        raise InvalidArgument("spec.policy.frozen", "a SESSION job trains its policy: leave it false")
    for section, why in SESSION_REFUSED_SECTIONS.items():
        if section in facts.sections:
            raise InvalidArgument(f"spec.{section}", f"must not be set for a SESSION job: {why}")
    for number in facts.numbers:
        section, _, name = number.path.removeprefix("spec.").partition(".")
        if section == "training" and name not in SESSION_TRAINING_FIELDS:
            raise InvalidArgument(number.path, "must not be set for a SESSION job: its client drives every step "
                                  "(a SESSION job reads only spec.training.seed and max_tokens_per_micro_batch)")
    if facts.max_retries:
        raise InvalidArgument("spec.training.max_retries", f"must be 0 or unset for a SESSION job, got "
                              f"{facts.max_retries}: a session is never retried (its client's state "
                              "cannot be replayed)")


def _check_training(facts: JobSpecFacts) -> None:
    _check_range("spec.training.total_steps", facts.total_steps, 1, MAX_TOTAL_STEPS)
    _check_range("spec.training.batch_size", facts.batch_size, 1, MAX_BATCH_SIZE)
    if facts.type is JobType.RL or facts.group_size:
        _check_range("spec.training.group_size", facts.group_size, 1, MAX_GROUP_SIZE)
    if facts.max_retries is not None:
        _check_range("spec.training.max_retries", facts.max_retries, 0, MAX_RETRIES)
    if facts.target_loss and facts.type is not JobType.SFT:
        raise InvalidArgument("spec.training.target_loss", "only SFT jobs stop on a target loss; "
                              "leave it 0 for other job types")


def _check_numbers(facts: JobSpecFacts) -> None:
    """Every numeric field must be finite; all but seeds must be >= 0; probabilities bounded."""
    for number in facts.numbers:
        name = number.path.rsplit(".", 1)[-1]
        if not math.isfinite(number.value):
            raise InvalidArgument(number.path, f"must be a finite number, got {number.value}")
        if number.value < 0 and not name.endswith("seed"):
            raise InvalidArgument(number.path, f"must not be negative, got {number.value:g}")
        if name in UNIT_INTERVAL_FIELDS and number.value > UNIT_INTERVAL_FIELDS[name]:
            raise InvalidArgument(number.path, f"must be at most {UNIT_INTERVAL_FIELDS[name]:g}, "
                                  f"got {number.value:g}")


def _check_async(facts: JobSpecFacts) -> None:
    """spec.async: k in 0..MAX_STALENESS, and k >= 1 only where a Rollout runs ahead of a
    Trainer (RL). A negative k and an unknown in_flight were refused as numbers and enums."""
    path = "spec.async.max_staleness"
    if facts.max_staleness > MAX_STALENESS:
        raise InvalidArgument(path, f"must be between 0 and {MAX_STALENESS} (0 = synchronous), "
                              f"got {facts.max_staleness}")
    if facts.max_staleness and facts.type is not JobType.RL:
        raise InvalidArgument(path, f"only RL jobs run asynchronously (the Rollout sampling ahead "
                              f"of the Trainer); an {facts.type} job has no such overlap: leave "
                              f"spec.async unset or max_staleness 0")


def _check_importance_mask(path: str, loss: LossFacts, job_type: JobType) -> None:
    """The Trainer's rules for LossConfig.importance_mask (its band only when the mask is on)."""
    if not loss.importance_mask:
        return
    cross_entropy = loss.function == "CROSS_ENTROPY" or (not loss.function and job_type is JobType.SFT)
    if cross_entropy:
        raise InvalidArgument(f"{path}.importance_mask", "masks a policy-gradient loss by its "
                              "importance ratio, and CROSS_ENTROPY (an SFT job's loss) has none: "
                              "leave it IMPORTANCE_MASK_UNSPECIFIED (off), or use a policy-gradient loss")
    low = loss.importance_mask_low or DEFAULT_IMPORTANCE_MASK_LOW
    high = loss.importance_mask_high or DEFAULT_IMPORTANCE_MASK_HIGH
    if not 0 < low <= 1:
        raise InvalidArgument(f"{path}.importance_mask_low", f"must be in (0, 1] (0 = 0.5), got {low:g}")
    if high < 1:
        raise InvalidArgument(f"{path}.importance_mask_high", f"must be >= 1 (0 = 2.0), got {high:g}")
    if low >= high:
        raise InvalidArgument(f"{path}.importance_mask_high", f"must be > importance_mask_low "
                              f"({low:g}): the band [{low:g}, {high:g}] keeps no ratio but exactly 1")


def _check_resource(path: str, request: ResourceRequest) -> None:
    if request.role not in LEASABLE_ROLES:
        raise InvalidArgument(f"{path}.role", "must be ROLE_TRAINER or ROLE_ROLLOUT (the driver's slot, "
                              "a coordinator's or for SESSION jobs a gateway's, is always added)")
    _check_range(f"{path}.device_count", request.device_count, 1, MAX_DEVICES_PER_REQUEST)


def _check_range(path: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidArgument(path, f"must be between {low} and {high}, got {value}")


def effective_priority(facts: JobSpecFacts) -> int:
    """Proto3 cannot tell 0 from unset: 0 means the documented default, 50."""
    return facts.priority or 50


def retries_allowed(facts: JobSpecFacts) -> int:
    """Re-queues after a worker loss: the spec's max_retries, DEFAULT_MAX_RETRIES when unset;
    never for a SESSION job (its client's state cannot be replayed)."""
    if facts.type is JobType.SESSION:
        return 0
    return DEFAULT_MAX_RETRIES if facts.max_retries is None else facts.max_retries


def default_resources(job_type: JobType) -> tuple[ResourceRequest, ...]:
    """Devices a job gets when its spec asks for none (the driver's slot is added separately)."""
    defaults = {
        JobType.RL: (ResourceRequest(role=Role.TRAINER), ResourceRequest(role=Role.ROLLOUT)),
        JobType.SFT: (ResourceRequest(role=Role.TRAINER),),
        JobType.INFERENCE: (ResourceRequest(role=Role.ROLLOUT),),
        JobType.SESSION: (ResourceRequest(role=Role.TRAINER), ResourceRequest(role=Role.ROLLOUT)),
    }
    return defaults.get(job_type, ())
