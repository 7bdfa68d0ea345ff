"""Every default of a JobSpec, listed once: `resolve_job_plan` applies them, docs/job_spec.md shows
them (scripts/gen_job_spec_docs.py renders `DEFAULTS`), and the Trainer and Rollout read the
ones their own APIs share (a LoRA rank 0, AdamW's betas 0, a token limit 0).

A row says which field, for which jobs, when the default applies, the value, and where the
resolved plan holds it; tests resolve each row's job and compare (tests/jobplan).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from opentinker_runtime.jobplan.plan import (
    AdvantageEstimator,
    DeviceKind,
    ImportanceMask,
    InFlight,
    KlEstimator,
    KlPlacement,
    LossAggregation,
    LossFunction,
    LrSchedule,
    Pairing,
    ResourcePlan,
    Role,
    TruncatedActions,
)

PRIORITY = 50
MAX_RETRIES = 2
EVAL_EPISODES = 32
INFERENCE_EPISODES = 32
OUTPUT_FILE = "{job_id}.jsonl"
EXAMPLE_JOB_ID = "job-x"
"""The job id the rows' checks resolve their specs with (`inference.output_path`'s value)."""
MESSAGES_FIELD = "messages"
ELO_K = 16.0
BARRIER_TIMEOUT_S = 300.0
PAIRING = Pairing.AUTO
IN_FLIGHT = InFlight.FINISH_ON_OLD_WEIGHTS

UNSET_SAMPLING_MAX_NEW_TOKENS = 32
UNSET_SAMPLING_TEMPERATURE = 1.0
MAX_NEW_TOKENS = 256
"""sampling.max_new_tokens 0 (the Rollout's own default, for jobs and its API alike)."""
SAMPLES_PER_PROMPT = 1
TRUNCATED_ACTIONS = TruncatedActions.JUDGED

LORA_RANK = 8
LORA_ALPHA_PER_RANK = 2.0
"""LoRA alpha 0 = this x rank."""

RL_LOSS_FUNCTION = LossFunction.PPO_CLIP
SFT_LOSS_FUNCTION = LossFunction.CROSS_ENTROPY
AGGREGATION = LossAggregation.TOKEN_MEAN
RL_CLIP = 0.2
"""clip_low and clip_high 0 in an RL job (the Trainer API refuses 0 for a clipped loss)."""
KL_ESTIMATOR = KlEstimator.K3
KL_PLACEMENT = KlPlacement.NONE
LOSS_TEMPERATURE = 1.0
"""loss.temperature 0 outside RL jobs and in the Trainer API; an RL job's is its sampling temperature."""
IMPORTANCE_MASK = ImportanceMask.OFF
IMPORTANCE_MASK_LOW = 0.5
IMPORTANCE_MASK_HIGH = 2.0

ESTIMATOR = AdvantageEstimator.GRPO
GAMMA = 1.0

BETA1 = 0.9
BETA2 = 0.999
EPSILON = 1e-8
SCHEDULE = LrSchedule.CONSTANT



def _device(role: Role) -> ResourcePlan:
    """One device of any kind for `role`."""
    return ResourcePlan(role=role, device_count=1, device_kind=DeviceKind.UNSPECIFIED, min_memory_bytes=0)


RESOURCES = {
    "RL": (_device(Role.TRAINER), _device(Role.ROLLOUT)),
    "SFT": (_device(Role.TRAINER),),
    "INFERENCE": (_device(Role.ROLLOUT),),
    "SESSION": (_device(Role.TRAINER), _device(Role.ROLLOUT)),
}
"""Devices per role when `resources` is empty (the driver's slot is always added)."""


ALL = ("RL", "SFT", "INFERENCE", "SESSION")
LEARNING = ("RL", "SFT")
EPISODES = ("RL", "INFERENCE")
MULTI_AGENT = "MULTI_AGENT"
"""A multi-agent RL job (`agents` set), as a row's job type."""


@dataclass(frozen=True, kw_only=True)
class Default:
    """One default: `field` (its path in the spec) takes `value` in `jobs` when `when` holds."""

    field: str
    jobs: tuple[str, ...]
    when: str
    value: object
    plan: str
    """Where the resolved JobPlan holds it: an attribute path (`policies[0].loss.clip_low`)."""
    shown: str = ""
    """How docs/job_spec.md writes the value when it is not the value itself."""
    example: Mapping[str, object] = field(default_factory=dict)
    """Spec fields a test sets besides the job's least spec for the row to apply (and for `value`)."""

    @property
    def text(self) -> str:
        return self.shown or _text(self.value)


def _text(value: object) -> str:
    if isinstance(value, str):
        return f'`"{value}"`' if not value.isupper() else f"`{value}`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _resources_text(requests: tuple[ResourcePlan, ...]) -> str:
    return " + ".join(f"1 {request.role.lower()} device" for request in requests)


DEFAULTS: tuple[Default, ...] = (
    Default(field="priority", jobs=ALL, when="0", value=PRIORITY, plan="priority"),
    *(Default(field="resources", jobs=(job,), when="empty", value=requests, plan="resources",
              shown=_resources_text(requests)) for job, requests in RESOURCES.items()),
    Default(field="training.max_retries", jobs=("RL", "SFT", "INFERENCE"), when="unset", value=MAX_RETRIES,
            plan="training.max_retries"),
    Default(field="training.max_retries", jobs=("SESSION",), when="always", value=0, plan="training.max_retries",
            shown="`0` (a session is never retried)"),
    Default(field="training.eval_episodes", jobs=("RL",), when="0", value=EVAL_EPISODES,
            plan="training.eval_episodes"),
    Default(field="inference.num_episodes", jobs=("INFERENCE",), when="0", value=INFERENCE_EPISODES,
            plan="inference.num_episodes"),
    Default(field="inference.output_path", jobs=("INFERENCE",), when="empty",
            value=OUTPUT_FILE.format(job_id=EXAMPLE_JOB_ID),
            plan="inference.output_path", shown="`<job_id>.jsonl` (in the tenant's `outputs/`)"),
    Default(field="dataset.messages_field", jobs=("SFT",), when="empty", value=MESSAGES_FIELD,
            plan="dataset.messages_field"),
    Default(field="policy.sampling.max_new_tokens", jobs=EPISODES, when="`sampling` unset",
            value=UNSET_SAMPLING_MAX_NEW_TOKENS, plan="policies[0].sampling.max_new_tokens"),
    Default(field="policy.sampling.temperature", jobs=("RL",), when="`sampling` unset",
            value=UNSET_SAMPLING_TEMPERATURE, plan="policies[0].sampling.temperature"),
    Default(field="policy.sampling.max_new_tokens", jobs=EPISODES, when="0, `sampling` set", value=MAX_NEW_TOKENS,
            plan="policies[0].sampling.max_new_tokens", example={"policy.sampling.seed": 1}),
    Default(field="policy.sampling.n", jobs=EPISODES, when="0", value=SAMPLES_PER_PROMPT,
            plan="policies[0].sampling.n"),
    Default(field="policy.limits.truncated_actions", jobs=EPISODES, when="UNSPECIFIED", value=TRUNCATED_ACTIONS,
            plan="policies[0].limits.truncated_actions"),
    Default(field="policy.adaptation.lora.rank", jobs=ALL, when="0", value=LORA_RANK,
            plan="policies[0].adaptation.lora.rank"),
    Default(field="policy.adaptation.lora.alpha", jobs=ALL, when="0", value=LORA_ALPHA_PER_RANK * LORA_RANK,
            plan="policies[0].adaptation.lora.alpha", shown=f"`{LORA_ALPHA_PER_RANK:g}` x rank"),
    Default(field="policy.algorithm.loss.function", jobs=("RL",), when="UNSPECIFIED", value=RL_LOSS_FUNCTION,
            plan="policies[0].loss.function"),
    Default(field="policy.algorithm.loss.function", jobs=("SFT",), when="UNSPECIFIED", value=SFT_LOSS_FUNCTION,
            plan="policies[0].loss.function"),
    Default(field="policy.algorithm.loss.aggregation", jobs=LEARNING, when="UNSPECIFIED", value=AGGREGATION,
            plan="policies[0].loss.aggregation"),
    Default(field="policy.algorithm.loss.clip_low", jobs=("RL",), when="0", value=RL_CLIP,
            plan="policies[0].loss.clip_low"),
    Default(field="policy.algorithm.loss.clip_high", jobs=("RL",), when="0", value=RL_CLIP,
            plan="policies[0].loss.clip_high"),
    Default(field="policy.algorithm.loss.kl_estimator", jobs=LEARNING, when="UNSPECIFIED", value=KL_ESTIMATOR,
            plan="policies[0].loss.kl_estimator"),
    Default(field="policy.algorithm.loss.kl_placement", jobs=LEARNING, when="UNSPECIFIED", value=KL_PLACEMENT,
            plan="policies[0].loss.kl_placement", shown="`NONE` (no KL penalty)"),
    Default(field="policy.algorithm.loss.temperature", jobs=("RL",), when="0", value=0.5,
            plan="policies[0].loss.temperature", example={"policy.sampling.temperature": 0.5},
            shown="the policy's sampling temperature (`1` when that is 0)"),
    Default(field="policy.algorithm.loss.temperature", jobs=("SFT",), when="0", value=LOSS_TEMPERATURE,
            plan="policies[0].loss.temperature"),
    Default(field="policy.algorithm.loss.importance_mask", jobs=("RL",), when="UNSPECIFIED", value=IMPORTANCE_MASK,
            plan="policies[0].loss.importance_mask", shown="`OFF`"),
    Default(field="policy.algorithm.loss.importance_mask_low", jobs=("RL",), when="0", value=IMPORTANCE_MASK_LOW,
            plan="policies[0].loss.importance_mask_low"),
    Default(field="policy.algorithm.loss.importance_mask_high", jobs=("RL",), when="0", value=IMPORTANCE_MASK_HIGH,
            plan="policies[0].loss.importance_mask_high"),
    Default(field="policy.algorithm.advantage.estimator", jobs=("RL",), when="UNSPECIFIED", value=ESTIMATOR,
            plan="policies[0].advantage.estimator"),
    Default(field="policy.algorithm.advantage.gamma", jobs=("RL",), when="0", value=GAMMA,
            plan="policies[0].advantage.gamma", shown="`1` (no discount)"),
    Default(field="policy.algorithm.optimizer.beta1", jobs=LEARNING, when="0", value=BETA1,
            plan="policies[0].optimizer.beta1"),
    Default(field="policy.algorithm.optimizer.beta2", jobs=LEARNING, when="0", value=BETA2,
            plan="policies[0].optimizer.beta2"),
    Default(field="policy.algorithm.optimizer.epsilon", jobs=LEARNING, when="0", value=EPSILON,
            plan="policies[0].optimizer.epsilon"),
    Default(field="policy.algorithm.optimizer.schedule", jobs=LEARNING, when="UNSPECIFIED", value=SCHEDULE,
            plan="policies[0].optimizer.schedule"),
    Default(field="policy.algorithm.optimizer.total_steps", jobs=LEARNING, when="0", value=10,
            plan="policies[0].optimizer.total_steps", shown="`training.total_steps`",
            example={"training.total_steps": 10}),
    Default(field="multi_agent.pairing", jobs=(MULTI_AGENT,), when="UNSPECIFIED", value=PAIRING,
            plan="multi_agent.pairing", shown="`AUTO`: FIXED_SEATS with as many agents as seats, else ROUND_ROBIN"),
    Default(field="multi_agent.elo_k", jobs=(MULTI_AGENT,), when="0", value=ELO_K, plan="multi_agent.elo_k"),
    Default(field="multi_agent.barrier_timeout_seconds", jobs=(MULTI_AGENT,), when="0", value=BARRIER_TIMEOUT_S,
            plan="multi_agent.barrier_timeout_s"),
    Default(field="async.in_flight", jobs=("RL",), when="UNSPECIFIED", value=IN_FLIGHT, plan="asynchrony.in_flight"),
)
"""The table docs/job_spec.md shows (its `## Defaults` section)."""
