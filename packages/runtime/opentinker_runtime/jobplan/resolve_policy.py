"""One AgentSpec (`spec.policy` or `spec.agents[i]`) as a PolicyPlan: its model, adaptation,
sampling, episode limits and, where it learns, its algorithm."""

from __future__ import annotations

import dataclasses

from opentinker_api.common.v1 import sampling_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.jobplan import defaults
from opentinker_runtime.jobplan.errors import ResolveError
from opentinker_runtime.jobplan.models import adaptation_plan, model_source
from opentinker_runtime.jobplan.names import enum_name
from opentinker_runtime.jobplan.plan import JobKind, LimitsPlan, PolicyPlan, SamplingPlan, TruncatedActions
from opentinker_runtime.jobplan.resolve_algorithm import (
    advantage_plan,
    check_importance_mask,
    loss_plan,
    optimizer_plan,
)

LEARNING_KINDS = (JobKind.RL, JobKind.SFT)


def check_policy(agent: job_pb2.AgentSpec, path: str, kind: JobKind, *, frozen: bool) -> None:
    """What every policy needs (a model) and what a learning one needs (an adaptation, a learning
    rate). `frozen`: a multi-agent job's agent that never learns (a single policy always does)."""
    if agent.model.WhichOneof("source") is None:
        raise ResolveError(f"{path}.model", "must be set (local, builtin or checkpoint)")
    if kind not in LEARNING_KINDS or frozen:
        return
    if agent.adaptation.WhichOneof("kind") is None:
        raise ResolveError(f"{path}.adaptation", "must be set for a training job (lora or full)")
    learning_rate = agent.algorithm.optimizer.learning_rate
    if not learning_rate > 0:
        raise ResolveError(f"{path}.algorithm.optimizer.learning_rate",
                           f"must be > 0 for a training job, got {learning_rate:g}")


def policy_plan(agent: job_pb2.AgentSpec, path: str, kind: JobKind, total_steps: int, *,
                frozen: bool) -> PolicyPlan:
    """The policy resolved (`check_policy` passed). Frozen agents and the policies of jobs that do
    not learn have no loss, advantage or optimizer."""
    sampling = sampling_plan(agent.sampling) if agent.HasField("sampling") else unset_sampling()
    learns = kind in LEARNING_KINDS and not frozen
    loss = loss_plan(agent.algorithm.loss, kind, sampling.temperature) if learns else None
    if loss is not None:
        check_importance_mask(loss, f"{path}.algorithm.loss")
    return PolicyPlan(
        path=path, agent_id=agent.agent_id, model=model_source(agent.model, f"{path}.model"),
        adaptation=adaptation_plan(agent.adaptation, f"{path}.adaptation"), loss=loss,
        advantage=advantage_plan(agent.algorithm.advantage) if learns and kind is JobKind.RL else None,
        optimizer=optimizer_plan(agent.algorithm.optimizer, total_steps) if learns else None,
        sampling=sampling, eval_sampling=greedy(sampling), limits=limits_plan(agent.limits), frozen=frozen)


def sampling_plan(sampling: sampling_pb2.SamplingParams) -> SamplingPlan:
    """A spec's `sampling`: its zero fields are the Rollout's defaults."""
    return SamplingPlan(
        max_new_tokens=sampling.max_new_tokens or defaults.MAX_NEW_TOKENS, temperature=sampling.temperature,
        top_p=sampling.top_p, top_k=sampling.top_k, stop=tuple(sampling.stop),
        stop_token_ids=tuple(sampling.stop_token_ids), n=sampling.n or defaults.SAMPLES_PER_PROMPT,
        seed=sampling.seed)


def unset_sampling() -> SamplingPlan:
    """A policy without `sampling`."""
    return SamplingPlan(max_new_tokens=defaults.UNSET_SAMPLING_MAX_NEW_TOKENS,
                        temperature=defaults.UNSET_SAMPLING_TEMPERATURE, top_p=0.0, top_k=0,
                        n=defaults.SAMPLES_PER_PROMPT, seed=0)


def greedy(sampling: SamplingPlan) -> SamplingPlan:
    """How evaluations and INFERENCE jobs sample: greedily, once, with the same token limit and stops."""
    return dataclasses.replace(sampling, temperature=0.0, top_p=0.0, top_k=0, n=1)


def limits_plan(limits: sampling_pb2.AgentLoopLimits) -> LimitsPlan:
    truncated = enum_name(sampling_pb2.TruncatedActions, limits.truncated_actions) or defaults.TRUNCATED_ACTIONS
    return LimitsPlan(
        max_turns=limits.max_turns, max_new_tokens_per_turn=limits.max_new_tokens_per_turn,
        max_total_tokens=limits.max_total_tokens,
        episode_timeout_s=limits.episode_timeout.ToNanoseconds() / 1e9,
        truncated_actions=TruncatedActions(truncated), truncation_penalty=limits.truncation_penalty)
