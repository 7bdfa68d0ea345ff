"""A job's token limits against its model's context window, checked at SubmitJob.

The Scheduler knows the window of a builtin model (its config, `BUILTIN_CONTEXT_TOKENS`) and of a
checkpoint of one (its base's: see checkpoint_models.py). It does not know a user's own model
directory, nor a builtin name it has never heard of: those are never refused here.

Only RL and INFERENCE jobs play episodes, so only they are checked (an SFT job ignores sampling and
limits). A turn must leave room for at least one prompt token; an episode (prompt, replies and
observations together) can never be longer than the window. The limits are the resolved plan's
(`opentinker_runtime.jobplan`): a turn's is the smaller of sampling.max_new_tokens (its defaults,
32 or 256, fit every builtin model) and limits.max_new_tokens_per_turn when set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opentinker_runtime.jobplan.plan import JobKind, JobPlan, PolicyPlan
from opentinker_runtime.ml.sources import ModelKind
from opentinker_scheduler.errors import InvalidArgument

BUILTIN_CONTEXT_TOKENS: dict[str, int] = {"tiny-llama": 512, "tiny-qwen2": 512, "small-llama": 1024}
"""max_position_embeddings of each builtin model (opentinker_runtime.ml.models.BUILTIN_MODELS; a test keeps
the two equal: the Scheduler does not import torch)."""
EPISODE_KINDS = (JobKind.RL, JobKind.INFERENCE)


@dataclass(frozen=True, kw_only=True)
class ModelContext:
    """A model's context window and what to call the model in a message."""

    tokens: int
    model: str
    """A builtin model's name, or a checkpoint's id."""
    base: str = ""
    """A checkpoint's builtin base model; "" for a builtin model itself."""

    def describe(self) -> str:
        """"tiny-llama (512 tokens" or "checkpoint X (base tiny-llama; 512 tokens": the caller closes it."""
        if self.base:
            return f"checkpoint {self.model} (base {self.base}; {self.tokens} tokens"
        return f"{self.model} ({self.tokens} tokens"


def builtin_context(name: str) -> ModelContext | None:
    """The window of builtin model `name`; None for a name the Scheduler does not know."""
    tokens = BUILTIN_CONTEXT_TOKENS.get(name)
    return None if tokens is None else ModelContext(tokens=tokens, model=name)


def check_context_limits(plan: JobPlan, checkpoints: Mapping[str, ModelContext] | None = None) -> None:
    """InvalidArgument for the first policy's limit its model's window cannot hold. `checkpoints`:
    the windows known of the checkpoints the spec names (by id); the rest are not checked."""
    if plan.kind not in EPISODE_KINDS:
        return
    for policy in plan.policies:
        context = _context_of(policy, checkpoints or {})
        if context is not None:
            _check_policy(policy, context)


def _context_of(policy: PolicyPlan, checkpoints: Mapping[str, ModelContext]) -> ModelContext | None:
    model = policy.model
    if model.kind == ModelKind.BUILTIN:
        return builtin_context(model.name)
    return checkpoints.get(model.name) if model.kind == ModelKind.CHECKPOINT else None


def _check_policy(policy: PolicyPlan, context: ModelContext) -> None:
    """The smaller of the turn limits applies (proto: AgentLoopLimits.max_new_tokens_per_turn)."""
    turn_limits = [(policy.sampling.max_new_tokens, f"{policy.path}.sampling.max_new_tokens")]
    if policy.limits.max_new_tokens_per_turn:
        turn_limits.append((policy.limits.max_new_tokens_per_turn, f"{policy.path}.limits.max_new_tokens_per_turn"))
    tokens, field = min(turn_limits)
    if tokens >= context.tokens:
        raise InvalidArgument(field, f"{tokens} new tokens per turn do not fit the context of "
                              f"{context.describe()}, the prompt included): use at most {context.tokens - 1}")
    episode = policy.limits.max_total_tokens
    if episode > context.tokens:
        raise InvalidArgument(f"{policy.path}.limits.max_total_tokens", f"{episode} tokens per episode do not fit "
                              f"the context of {context.describe()}): use at most {context.tokens} (0 = the context "
                              "itself)")
