"""A policy's Algorithm: the loss (the job type's default under the fields the spec sets), the
advantage estimator and the optimizer, with every default applied."""

from __future__ import annotations

from opentinker_api.common.v1 import algorithm_pb2
from opentinker_runtime.jobplan import defaults
from opentinker_runtime.jobplan.errors import ResolveError
from opentinker_runtime.jobplan.names import enum_name
from opentinker_runtime.jobplan.plan import (
    AdvantageEstimator,
    AdvantagePlan,
    ImportanceMask,
    JobKind,
    KlEstimator,
    KlPlacement,
    LossAggregation,
    LossFunction,
    LossPlan,
    LrSchedule,
    OptimizerPlan,
)


def loss_plan(loss: algorithm_pb2.LossConfig, kind: JobKind, sampling_temperature: float) -> LossPlan:
    """The job type's default loss with the spec's set fields on top (an unset function or clip
    range keeps the default, so `loss: {aggregation: SEQUENCE_MEAN}` is a complete spec)."""
    rl = kind is JobKind.RL
    function = enum_name(algorithm_pb2.LossFunction, loss.function) or (
        defaults.RL_LOSS_FUNCTION if rl else defaults.SFT_LOSS_FUNCTION)
    return LossPlan(
        function=LossFunction(function),
        aggregation=LossAggregation(enum_name(algorithm_pb2.LossAggregation, loss.aggregation) or defaults.AGGREGATION),
        clip_low=loss.clip_low or (defaults.RL_CLIP if rl else 0.0),
        clip_high=loss.clip_high or (defaults.RL_CLIP if rl else 0.0),
        dual_clip_c=loss.dual_clip_c, truncation_cap=loss.truncation_cap, token_sum_divisor=loss.token_sum_divisor,
        kl_coef=loss.kl_coef,
        kl_estimator=KlEstimator(enum_name(algorithm_pb2.KlEstimator, loss.kl_estimator) or defaults.KL_ESTIMATOR),
        kl_placement=KlPlacement(enum_name(algorithm_pb2.KlPlacement, loss.kl_placement) or defaults.KL_PLACEMENT),
        entropy_coef=loss.entropy_coef,
        temperature=loss.temperature or ((sampling_temperature or defaults.LOSS_TEMPERATURE) if rl
                                         else defaults.LOSS_TEMPERATURE),
        importance_mask=ImportanceMask(enum_name(algorithm_pb2.ImportanceMask, loss.importance_mask)
                                       or defaults.IMPORTANCE_MASK),
        importance_mask_low=loss.importance_mask_low or defaults.IMPORTANCE_MASK_LOW,
        importance_mask_high=loss.importance_mask_high or defaults.IMPORTANCE_MASK_HIGH,
        dro_beta=loss.dro_beta)


def check_importance_mask(loss: LossPlan, path: str) -> None:
    """The Trainer's rules for the importance mask (its band only when the mask is on), checked at
    submit so a bad band fails then, not at the job's first step."""
    if loss.importance_mask is ImportanceMask.OFF:
        return
    if loss.function is LossFunction.CROSS_ENTROPY:
        raise ResolveError(f"{path}.importance_mask", "masks a policy-gradient loss by its importance ratio, and "
                           "CROSS_ENTROPY (an SFT job's loss) has none: leave it IMPORTANCE_MASK_UNSPECIFIED "
                           "(off), or use a policy-gradient loss")
    low, high = loss.importance_mask_low, loss.importance_mask_high
    if not 0 < low <= 1:
        raise ResolveError(f"{path}.importance_mask_low", f"must be in (0, 1] (0 = {defaults.IMPORTANCE_MASK_LOW}), "
                           f"got {low:g}")
    if high < 1:
        raise ResolveError(f"{path}.importance_mask_high", f"must be >= 1 (0 = {defaults.IMPORTANCE_MASK_HIGH}), "
                           f"got {high:g}")
    if low >= high:
        raise ResolveError(f"{path}.importance_mask_high", f"must be > importance_mask_low ({low:g}): the band "
                           f"[{low:g}, {high:g}] keeps no ratio but exactly 1")


def advantage_plan(advantage: algorithm_pb2.AdvantageConfig) -> AdvantagePlan:
    estimator = enum_name(algorithm_pb2.AdvantageEstimator, advantage.estimator) or defaults.ESTIMATOR
    return AdvantagePlan(estimator=AdvantageEstimator(estimator), normalize_by_std=advantage.normalize_by_std,
                         gamma=advantage.gamma or defaults.GAMMA)


def optimizer_plan(optimizer: algorithm_pb2.OptimizerConfig, total_steps: int) -> OptimizerPlan:
    """AdamW's zero fields take their defaults; a decay schedule without total_steps decays over the job's."""
    schedule = enum_name(algorithm_pb2.LrSchedule, optimizer.schedule) or defaults.SCHEDULE
    return OptimizerPlan(
        learning_rate=optimizer.learning_rate, weight_decay=optimizer.weight_decay,
        beta1=optimizer.beta1 or defaults.BETA1, beta2=optimizer.beta2 or defaults.BETA2,
        epsilon=optimizer.epsilon or defaults.EPSILON, max_grad_norm=optimizer.max_grad_norm,
        warmup_steps=optimizer.warmup_steps, schedule=LrSchedule(schedule),
        total_steps=optimizer.total_steps or total_steps)
