"""A JobSpec resolved: plain values, every default applied (see `resolve_job_plan`).

No protobuf here. Enum-valued fields hold the proto value's name without its prefix
(`LossFunction.PPO_CLIP` is `LOSS_FUNCTION_PPO_CLIP`), so each service maps them to its own
enums by name. Field paths (`path`) are the JobSpec's, as errors and messages name them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from opentinker_runtime.ml.sources import LoraSpec, ModelSource


class JobKind(StrEnum):
    RL = "RL"
    SFT = "SFT"
    INFERENCE = "INFERENCE"
    SESSION = "SESSION"


class AdaptationKind(StrEnum):
    NONE = "NONE"
    """The spec sets no adaptation (an INFERENCE job, a frozen agent): the base weights as they are."""
    LORA = "LORA"
    FULL = "FULL"


class LossFunction(StrEnum):
    CROSS_ENTROPY = "CROSS_ENTROPY"
    POLICY_GRADIENT = "POLICY_GRADIENT"
    PPO_CLIP = "PPO_CLIP"
    DUAL_CLIP = "DUAL_CLIP"
    TRUNCATED_IS = "TRUNCATED_IS"
    GSPO = "GSPO"
    IMPORTANCE_SAMPLING = "IMPORTANCE_SAMPLING"
    CISPO = "CISPO"
    DRO = "DRO"


class LossAggregation(StrEnum):
    TOKEN_MEAN = "TOKEN_MEAN"
    SEQUENCE_MEAN = "SEQUENCE_MEAN"
    TOKEN_SUM_NORM = "TOKEN_SUM_NORM"
    SUM = "SUM"


class KlEstimator(StrEnum):
    K1 = "K1"
    K3 = "K3"


class KlPlacement(StrEnum):
    NONE = "NONE"
    LOSS = "LOSS"
    REWARD = "REWARD"


class ImportanceMask(StrEnum):
    OFF = "OFF"
    TOKEN = "TOKEN"
    SEQUENCE = "SEQUENCE"


class AdvantageEstimator(StrEnum):
    GRPO = "GRPO"
    RLOO = "RLOO"
    REINFORCE_PLUS_PLUS = "REINFORCE_PLUS_PLUS"
    DISCOUNTED_RETURN = "DISCOUNTED_RETURN"


class LrSchedule(StrEnum):
    CONSTANT = "CONSTANT"
    LINEAR = "LINEAR"
    COSINE = "COSINE"


class TruncatedActions(StrEnum):
    JUDGED = "JUDGED"
    END_EPISODE = "END_EPISODE"


class Pairing(StrEnum):
    AUTO = "AUTO"
    """FIXED_SEATS when there are as many agents as the game has seats, else ROUND_ROBIN (decided
    when the game's seats are known, at the job's start)."""
    FIXED_SEATS = "FIXED_SEATS"
    ROUND_ROBIN = "ROUND_ROBIN"


class InFlight(StrEnum):
    FINISH_ON_OLD_WEIGHTS = "FINISH_ON_OLD_WEIGHTS"
    SWAP_WEIGHTS = "SWAP_WEIGHTS"


class Role(StrEnum):
    TRAINER = "TRAINER"
    ROLLOUT = "ROLLOUT"


class DeviceKind(StrEnum):
    UNSPECIFIED = "UNSPECIFIED"
    """Any kind."""
    CPU = "CPU"
    CUDA = "CUDA"


@dataclass(frozen=True, kw_only=True)
class AdaptationPlan:
    kind: AdaptationKind
    lora: LoraSpec | None = None
    """Rank and alpha resolved (rank 0 = 8, alpha 0 = 2 x rank); None unless kind is LORA."""
    keep_reference: bool = False
    """FULL: keep a frozen reference copy for KL penalties."""


@dataclass(frozen=True, kw_only=True)
class SamplingPlan:
    max_new_tokens: int
    temperature: float
    """0 = greedy."""
    top_p: float
    """0 or 1 = off."""
    top_k: int
    """0 = off."""
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    n: int
    seed: int
    """0 = unseeded (episodes mix it with their own seeds)."""


@dataclass(frozen=True, kw_only=True)
class LimitsPlan:
    max_turns: int
    """0 = no limit (here and below)."""
    max_new_tokens_per_turn: int
    max_total_tokens: int
    episode_timeout_s: float
    truncated_actions: TruncatedActions
    truncation_penalty: float


@dataclass(frozen=True, kw_only=True)
class LossPlan:
    function: LossFunction
    aggregation: LossAggregation
    clip_low: float
    clip_high: float
    dual_clip_c: float
    truncation_cap: float
    token_sum_divisor: float
    """0 = the length of the batch's longest sequence."""
    kl_coef: float
    kl_estimator: KlEstimator
    kl_placement: KlPlacement
    entropy_coef: float
    temperature: float
    importance_mask: ImportanceMask
    importance_mask_low: float
    importance_mask_high: float
    dro_beta: float


@dataclass(frozen=True, kw_only=True)
class AdvantagePlan:
    estimator: AdvantageEstimator
    normalize_by_std: bool = False
    gamma: float


@dataclass(frozen=True, kw_only=True)
class OptimizerPlan:
    learning_rate: float
    weight_decay: float
    beta1: float
    beta2: float
    epsilon: float
    max_grad_norm: float
    """0 = no clipping."""
    warmup_steps: int
    schedule: LrSchedule
    total_steps: int
    """Steps LINEAR and COSINE decay over (the job's total_steps when the spec leaves it 0)."""


@dataclass(frozen=True, kw_only=True)
class PolicyPlan:
    """One policy: `spec.policy`, or one of `spec.agents`."""

    path: str
    """`spec.policy` or `spec.agents[i]`: the prefix of this policy's field paths."""
    agent_id: str
    model: ModelSource
    adaptation: AdaptationPlan
    loss: LossPlan | None
    """None where the policy never trains (INFERENCE and SESSION jobs, frozen agents)."""
    advantage: AdvantagePlan | None
    """RL jobs' learning policies only."""
    optimizer: OptimizerPlan | None
    """None where the policy has no Trainer session to open with it (INFERENCE jobs, frozen agents;
    a SESSION job's client sends its own optimizer with each step)."""
    sampling: SamplingPlan
    """How training rollouts sample."""
    eval_sampling: SamplingPlan
    """How evaluations and INFERENCE jobs sample: greedily, once, with the training limits and stops."""
    limits: LimitsPlan
    frozen: bool = False
    """A multi-agent job's snapshot opponent: it plays but never learns (a single policy is never frozen)."""


@dataclass(frozen=True, kw_only=True)
class TrainingPlan:
    total_steps: int
    batch_size: int
    group_size: int
    max_tokens_per_micro_batch: int
    """0 = the Trainer's own choice (from the model's size and the free memory)."""
    eval_every_steps: int
    eval_episodes: int
    checkpoint_every_steps: int
    max_retries: int
    seed: int
    max_duration_s: float
    """Stored, not enforced yet."""
    target_loss: float


@dataclass(frozen=True, kw_only=True)
class EnvironmentPlan:
    path: str
    """`spec.environment` or `spec.multi_agent.eval_environment`."""
    env_name: str
    config: Mapping[str, object] = field(default_factory=dict)
    """The game's config, as JSON values."""
    envhost: str
    """A registered EnvHost's id or name ("" = none named)."""
    envhost_address: str
    """host:port ("" = the stack's default EnvHost, until `envhost` is resolved to an address)."""


@dataclass(frozen=True, kw_only=True)
class MultiAgentPlan:
    pairing: Pairing
    eval_environment: EnvironmentPlan | None = None
    elo_k: float
    barrier_timeout_s: float


@dataclass(frozen=True, kw_only=True)
class AsyncPlan:
    max_staleness: int
    """0 = synchronous."""
    in_flight: InFlight


@dataclass(frozen=True, kw_only=True)
class DatasetPlan:
    path: str
    messages_field: str


@dataclass(frozen=True, kw_only=True)
class InferencePlan:
    num_episodes: int
    output_path: str
    """As the spec names it (relative to the tenant's outputs/); `<job_id>.jsonl` when the spec leaves
    it empty, "" while the job has no id yet (`resolve_job_plan(spec)` without one)."""


@dataclass(frozen=True, kw_only=True)
class ResourcePlan:
    role: Role
    device_count: int
    device_kind: DeviceKind
    min_memory_bytes: int
    dedicated: bool = False
    """`dedicated_device`: never a share of a device, even for a LoRA job."""


@dataclass(frozen=True, kw_only=True)
class JobPlan:
    kind: JobKind
    display_name: str
    priority: int
    policy: PolicyPlan | None = None
    """Single-agent jobs; None in multi-agent jobs."""
    agents: tuple[PolicyPlan, ...] = ()
    environment: EnvironmentPlan | None = None
    training: TrainingPlan
    resources: tuple[ResourcePlan, ...] = ()
    dataset: DatasetPlan | None = None
    inference: InferencePlan | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    multi_agent: MultiAgentPlan | None = None
    """Multi-agent jobs only."""
    asynchrony: AsyncPlan

    @property
    def policies(self) -> tuple[PolicyPlan, ...]:
        """Every policy of the job: the single one, or each agent's."""
        return (self.policy,) if self.policy is not None else self.agents

    @property
    def environments(self) -> tuple[EnvironmentPlan, ...]:
        """Every environment the spec names (the job's, a multi-agent job's eval environment)."""
        eval_environment = self.multi_agent.eval_environment if self.multi_agent else None
        return tuple(e for e in (self.environment, eval_environment) if e is not None)
