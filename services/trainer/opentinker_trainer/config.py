"""Domain configuration of sessions, optimizers and losses (twins of the API messages).

Each config validates itself on construction and raises ValidationError naming the API field
(e.g. "loss.clip_low"), so a bad request is refused before any tensor is touched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from opentinker_runtime.ml.sources import LoraSpec, ModelSource
from opentinker_trainer.errors import ValidationError


class LossFunction(StrEnum):
    CROSS_ENTROPY = "cross_entropy"
    POLICY_GRADIENT = "policy_gradient"
    PPO_CLIP = "ppo_clip"
    DUAL_CLIP = "dual_clip"
    TRUNCATED_IS = "truncated_is"
    GSPO = "gspo"
    IMPORTANCE_SAMPLING = "importance_sampling"  # Tinker's importance_sampling: -r * A
    CISPO = "cispo"                              # Tinker's cispo
    DRO = "dro"                                  # Tinker's dro


RATIO_LOSSES = frozenset({LossFunction.PPO_CLIP, LossFunction.DUAL_CLIP,
                          LossFunction.TRUNCATED_IS, LossFunction.GSPO,
                          LossFunction.IMPORTANCE_SAMPLING, LossFunction.CISPO, LossFunction.DRO})
"""Losses that read the datums' sampling logprobs."""


class LossAggregation(StrEnum):
    TOKEN_MEAN = "token_mean"          # mean over all loss-masked tokens of the batch
    SEQUENCE_MEAN = "sequence_mean"    # mean within each sequence, then over sequences
    TOKEN_SUM_NORM = "token_sum_norm"  # per-sequence token sum / constant, mean over sequences
    SUM = "sum"                        # sum over the batch, no denominator (Tinker's reduction)


class KlEstimator(StrEnum):
    K1 = "k1"  # log(p/q)
    K3 = "k3"  # (q/p - 1) - log(q/p)


class KlPlacement(StrEnum):
    NONE = "none"
    LOSS = "loss"
    REWARD = "reward"  # -kl_coef * kl per token, added to the advantages as a reward-to-go


class ImportanceMask(StrEnum):
    """Masked importance sampling: which tokens lose their loss weight when their importance
    ratio r = p / p_sampling leaves the band [importance_mask_low, importance_mask_high]."""

    OFF = "off"
    TOKEN = "token"        # each token whose own ratio leaves the band
    SEQUENCE = "sequence"  # every token of a sequence whose geometric-mean ratio leaves it


class LrSchedule(StrEnum):
    CONSTANT = "constant"
    LINEAR = "linear"
    COSINE = "cosine"


@dataclass(frozen=True, kw_only=True)
class LossConfig:
    """What ForwardBackward minimises. Clip ranges: ratio in [1 - clip_low, 1 + clip_high].

    importance_mask: tokens (or sequences) whose importance ratio, taken at the current
    parameters before any gradient, leaves [importance_mask_low, importance_mask_high] get no
    loss weight and count in no denominator (`training.objective`).
    """

    function: LossFunction
    aggregation: LossAggregation = LossAggregation.TOKEN_MEAN
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip_c: float = 3.0
    truncation_cap: float = 2.0
    token_sum_divisor: float = 0.0  # 0 = the longest sequence of the batch
    kl_coef: float = 0.0
    kl_estimator: KlEstimator = KlEstimator.K3
    kl_placement: KlPlacement = KlPlacement.NONE
    entropy_coef: float = 0.0
    temperature: float = 1.0
    importance_mask: ImportanceMask = ImportanceMask.OFF
    importance_mask_low: float = 0.5
    importance_mask_high: float = 2.0
    dro_beta: float = 0.0  # DRO's penalty weight; DRO requires > 0

    def __post_init__(self) -> None:
        for name in ("clip_low", "clip_high", "dual_clip_c", "truncation_cap",
                     "token_sum_divisor", "kl_coef", "entropy_coef", "temperature",
                     "importance_mask_low", "importance_mask_high", "dro_beta"):
            _require_finite(f"loss.{name}", getattr(self, name))
        _require(self.temperature > 0, "loss.temperature", "must be > 0")
        _require(self.token_sum_divisor >= 0, "loss.token_sum_divisor", "must be >= 0")
        _require(self.kl_coef >= 0, "loss.kl_coef", "must be >= 0")
        self._check_function_parameters()
        if self.masks_importance:
            self._check_importance_mask()

    def _check_function_parameters(self) -> None:
        if self.function in (LossFunction.PPO_CLIP, LossFunction.DUAL_CLIP, LossFunction.GSPO):
            _require(0 < self.clip_low < 1, "loss.clip_low", f"must be in (0, 1) for "
                     f"{self.function}, got {self.clip_low}")
            _require(self.clip_high > 0, "loss.clip_high", f"must be > 0 for {self.function}, "
                     f"got {self.clip_high}")
        if self.function == LossFunction.CISPO:
            self._check_cispo_clip()
        if self.function == LossFunction.DRO:
            _require(self.dro_beta > 0, "loss.dro_beta", f"must be > 0 for LOSS_FUNCTION_DRO (the "
                     f"weight of its quadratic penalty; there is no default), got {self.dro_beta:g}")
        if self.function == LossFunction.DUAL_CLIP:
            _require(self.dual_clip_c > 1, "loss.dual_clip_c", f"must be > 1, got {self.dual_clip_c}")
        if self.kl_placement == KlPlacement.REWARD and self.kl_coef > 0:
            _require(self.uses_advantages, "loss.kl_placement", "KL_PLACEMENT_REWARD shapes the "
                     "advantages, and cross-entropy has none: use KL_PLACEMENT_LOSS")
        if self.function == LossFunction.TRUNCATED_IS:
            _require(self.truncation_cap > 0, "loss.truncation_cap",
                     f"must be > 0, got {self.truncation_cap}")

    def _check_cispo_clip(self) -> None:
        """CISPO clips r to [1 - clip_low, 1 + clip_high]: clip_low 1 = no lower bound (Tinker's
        clip_low_threshold 0), clip_low 0 or clip_high 0 = no room on that side."""
        _require(0 <= self.clip_low <= 1, "loss.clip_low", f"must be in [0, 1] for cispo (the "
                 f"ratio's lower bound 1 - clip_low in [0, 1]), got {self.clip_low:g}")
        _require(self.clip_high >= 0, "loss.clip_high", f"must be >= 0 for cispo (the ratio's "
                 f"upper bound 1 + clip_high >= 1), got {self.clip_high:g}")

    def _check_importance_mask(self) -> None:
        _require(self.uses_advantages, "loss.importance_mask", "masks a policy-gradient loss by "
                 "its importance ratio, and CROSS_ENTROPY has none: leave it "
                 "IMPORTANCE_MASK_UNSPECIFIED (off), or use a policy-gradient loss")
        low, high = self.importance_mask_low, self.importance_mask_high
        _require(0 < low <= 1, "loss.importance_mask_low", f"must be in (0, 1] (0 = 0.5), got {low:g}")
        _require(high >= 1, "loss.importance_mask_high", f"must be >= 1 (0 = 2.0), got {high:g}")
        _require(low < high, "loss.importance_mask_high", f"must be > importance_mask_low "
                 f"({low:g}): the band [{low:g}, {high:g}] keeps no ratio but exactly 1")

    @property
    def masks_importance(self) -> bool:
        return self.importance_mask != ImportanceMask.OFF

    @property
    def uses_ratio(self) -> bool:
        """True when the loss needs the datums' sampling logprobs."""
        return self.function in RATIO_LOSSES

    @property
    def uses_advantages(self) -> bool:
        return self.function != LossFunction.CROSS_ENTROPY

    @property
    def kl_in_loss(self) -> bool:
        return self.kl_placement == KlPlacement.LOSS and self.kl_coef > 0

    @property
    def kl_in_reward(self) -> bool:
        return self.kl_placement == KlPlacement.REWARD and self.kl_coef > 0

    @property
    def needs_reference(self) -> bool:
        """True when the loss reads reference-policy logprobs (a KL term in loss or reward)."""
        return self.kl_in_loss or self.kl_in_reward


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """AdamW with global-norm clipping, linear warmup and a decay schedule.

    LINEAR and COSINE decay to 0 at `total_steps`, which they require (> warmup_steps).
    """

    learning_rate: float
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    max_grad_norm: float = 0.0  # 0 = no clipping
    warmup_steps: int = 0
    schedule: LrSchedule = LrSchedule.CONSTANT
    total_steps: int = 0

    def __post_init__(self) -> None:
        for name in ("learning_rate", "weight_decay", "beta1", "beta2", "epsilon", "max_grad_norm"):
            _require_finite(f"optimizer.{name}", getattr(self, name))
        _require(self.learning_rate > 0, "optimizer.learning_rate", "must be > 0")
        _require(self.weight_decay >= 0, "optimizer.weight_decay", "must be >= 0")
        _require(0 <= self.beta1 < 1, "optimizer.beta1", "must be in [0, 1)")
        _require(0 <= self.beta2 < 1, "optimizer.beta2", "must be in [0, 1)")
        _require(self.epsilon > 0, "optimizer.epsilon", "must be > 0")
        _require(self.max_grad_norm >= 0, "optimizer.max_grad_norm", "must be >= 0 (0 = off)")
        _require(self.warmup_steps >= 0, "optimizer.warmup_steps", "must be >= 0")
        _require(self.total_steps >= 0, "optimizer.total_steps", "must be >= 0")
        if self.schedule in (LrSchedule.LINEAR, LrSchedule.COSINE):
            _require(self.total_steps > self.warmup_steps, "optimizer.total_steps",
                     f"the {self.schedule} schedule decays to 0 at total_steps, which must be > "
                     f"warmup_steps ({self.warmup_steps}); got {self.total_steps}")


@dataclass(frozen=True, kw_only=True)
class AdamStep:
    """The AdamW hyperparameters of one optimizer step: OptimStepRequest.adam (Tinker's
    AdamParams), which then replace the session's OptimizerConfig, or that config's values at
    the step (`optim.scheduled_adam_step`). Every value is taken as given."""

    learning_rate: float
    beta1: float
    beta2: float
    epsilon: float
    weight_decay: float
    max_grad_norm: float  # 0 = no clipping

    def __post_init__(self) -> None:
        for name in ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay", "max_grad_norm"):
            _require_finite(f"adam.{name}", getattr(self, name))
        _require(self.learning_rate >= 0, "adam.learning_rate", f"must be >= 0, got {self.learning_rate:g}")
        _require(0 <= self.beta1 < 1, "adam.beta1", f"must be in [0, 1), got {self.beta1:g}")
        _require(0 <= self.beta2 < 1, "adam.beta2", f"must be in [0, 1), got {self.beta2:g}")
        _require(self.epsilon > 0, "adam.epsilon", f"must be > 0, got {self.epsilon:g}")
        _require(self.weight_decay >= 0, "adam.weight_decay", f"must be >= 0, got {self.weight_decay:g}")
        _require(self.max_grad_norm >= 0, "adam.max_grad_norm",
                 f"must be >= 0 (0 = no clipping), got {self.max_grad_norm:g}")


@dataclass(frozen=True, kw_only=True)
class SessionSpec:
    """Everything CreateSession fixes for the life of a session. lora=None = full training."""

    base: ModelSource
    optimizer: OptimizerConfig
    lora: LoraSpec | None = None
    keep_reference: bool = False
    job_id: str = ""
    seed: int = 0
    max_tokens_per_micro_batch: int = 0  # 0 = the Trainer's default (memory.session_micro_batch_tokens)

    def __post_init__(self) -> None:
        _require(self.max_tokens_per_micro_batch >= 0, "max_tokens_per_micro_batch", "must be >= 0")


def _require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ValidationError(field, message)


def _require_finite(field: str, value: float) -> None:
    _require(math.isfinite(value), field, f"must be a finite number, got {value}")
