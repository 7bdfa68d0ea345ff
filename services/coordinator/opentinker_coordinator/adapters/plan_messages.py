"""A job's plan (opentinker_runtime.jobplan: plain values, every default applied) as the messages
the Trainer and Rollout take. Nothing is defaulted here: each field is the plan's value."""

from __future__ import annotations

from google.protobuf import duration_pb2, struct_pb2

from opentinker_api.common.v1 import algorithm_pb2, environment_pb2, model_pb2, sampling_pb2
from opentinker_runtime.jobplan.models import PRECISIONS
from opentinker_runtime.jobplan.names import enum_value
from opentinker_runtime.jobplan.plan import (
    AdaptationKind,
    AdaptationPlan,
    EnvironmentPlan,
    LimitsPlan,
    LossPlan,
    OptimizerPlan,
    SamplingPlan,
)
from opentinker_runtime.ml.sources import ModelKind, ModelSource

PRECISION_VALUES = {precision: value for value, precision in PRECISIONS.items()}


def model_message(model: ModelSource) -> model_pb2.ModelReference:
    reference = model_pb2.ModelReference(precision=PRECISION_VALUES[model.precision])
    if model.kind == ModelKind.BUILTIN:
        reference.builtin.CopyFrom(model_pb2.BuiltinModel(name=model.name, seed=model.seed))
    elif model.kind == ModelKind.LOCAL:
        reference.local.CopyFrom(model_pb2.LocalModel(path=model.path, tokenizer_path=model.tokenizer_path))
    else:
        reference.checkpoint.CopyFrom(model_pb2.CheckpointModel(checkpoint_id=model.name))
    return reference


def adaptation_message(adaptation: AdaptationPlan) -> model_pb2.Adaptation:
    """An unset Adaptation for NONE (the base weights as they are)."""
    if adaptation.kind is AdaptationKind.LORA:
        lora = adaptation.lora
        return model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(
            rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout, target_modules=list(lora.target_modules)))
    if adaptation.kind is AdaptationKind.FULL:
        return model_pb2.Adaptation(full=model_pb2.FullAdaptation(keep_reference=adaptation.keep_reference))
    return model_pb2.Adaptation()


def optimizer_message(optimizer: OptimizerPlan) -> algorithm_pb2.OptimizerConfig:
    return algorithm_pb2.OptimizerConfig(
        learning_rate=optimizer.learning_rate, weight_decay=optimizer.weight_decay, beta1=optimizer.beta1,
        beta2=optimizer.beta2, epsilon=optimizer.epsilon, max_grad_norm=optimizer.max_grad_norm,
        warmup_steps=optimizer.warmup_steps, total_steps=optimizer.total_steps,
        schedule=enum_value(algorithm_pb2.LrSchedule, optimizer.schedule))


def loss_message(loss: LossPlan) -> algorithm_pb2.LossConfig:
    return algorithm_pb2.LossConfig(
        function=enum_value(algorithm_pb2.LossFunction, loss.function),
        aggregation=enum_value(algorithm_pb2.LossAggregation, loss.aggregation),
        clip_low=loss.clip_low, clip_high=loss.clip_high, dual_clip_c=loss.dual_clip_c,
        truncation_cap=loss.truncation_cap, token_sum_divisor=loss.token_sum_divisor, kl_coef=loss.kl_coef,
        kl_estimator=enum_value(algorithm_pb2.KlEstimator, loss.kl_estimator),
        kl_placement=_zero_or_value(algorithm_pb2.KlPlacement, loss.kl_placement, "NONE"),
        entropy_coef=loss.entropy_coef, temperature=loss.temperature,
        importance_mask=_zero_or_value(algorithm_pb2.ImportanceMask, loss.importance_mask, "OFF"),
        importance_mask_low=loss.importance_mask_low, importance_mask_high=loss.importance_mask_high,
        dro_beta=loss.dro_beta)


def _zero_or_value(enum_type: object, name: str, zero_name: str) -> int:
    """The wire says "none" (no KL penalty, no importance mask) with the zero value."""
    return 0 if name == zero_name else enum_value(enum_type, name)


def sampling_message(sampling: SamplingPlan) -> sampling_pb2.SamplingParams:
    return sampling_pb2.SamplingParams(
        max_new_tokens=sampling.max_new_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
        top_k=sampling.top_k, stop=list(sampling.stop), stop_token_ids=list(sampling.stop_token_ids),
        n=sampling.n, seed=sampling.seed)


def limits_message(limits: LimitsPlan) -> sampling_pb2.AgentLoopLimits:
    timeout = duration_pb2.Duration()
    timeout.FromNanoseconds(round(limits.episode_timeout_s * 1e9))
    return sampling_pb2.AgentLoopLimits(
        max_turns=limits.max_turns, max_new_tokens_per_turn=limits.max_new_tokens_per_turn,
        max_total_tokens=limits.max_total_tokens, episode_timeout=timeout if limits.episode_timeout_s else None,
        truncated_actions=enum_value(sampling_pb2.TruncatedActions, limits.truncated_actions),
        truncation_penalty=limits.truncation_penalty)


def environment_message(environment: EnvironmentPlan) -> environment_pb2.EnvironmentReference:
    config = struct_pb2.Struct()
    config.update(environment.config)
    return environment_pb2.EnvironmentReference(
        env_name=environment.env_name, config=config if environment.config else None,
        envhost=environment.envhost, envhost_address=environment.envhost_address)
