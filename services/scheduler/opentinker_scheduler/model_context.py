"""A job's token limits against its model's context window, checked at SubmitJob.

The Scheduler knows the window of a builtin model (its config, `BUILTIN_CONTEXT_TOKENS`) and of a
checkpoint of one (its base's: see checkpoint_models.py). It does not know a user's own model
directory, nor a builtin name it has never heard of: those are never refused here.

Only RL and INFERENCE jobs play episodes, so only they are checked (an SFT job ignores sampling and
limits). A turn must leave room for at least one prompt token; an episode (prompt, replies and
observations together) can never be longer than the window. Unset and 0 limits are the Rollout's
defaults (32 or 256 new tokens per turn, no episode limit), which fit every builtin model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opentinker_scheduler.errors import InvalidArgument
from opentinker_scheduler.model import AgentFacts, JobSpecFacts, JobType

BUILTIN_CONTEXT_TOKENS: dict[str, int] = {"tiny-llama": 512, "tiny-qwen2": 512, "small-llama": 1024}
"""max_position_embeddings of each builtin model (opentinker_runtime.ml.models.BUILTIN_MODELS; a test keeps
the two equal: the Scheduler does not import torch)."""
EPISODE_JOB_TYPES = (JobType.RL, JobType.INFERENCE)
TURN_LIMITS = ("sampling.max_new_tokens", "limits.max_new_tokens_per_turn")
EPISODE_LIMIT = "limits.max_total_tokens"


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


def check_context_limits(facts: JobSpecFacts, checkpoints: Mapping[str, ModelContext] | None = None) -> None:
    """InvalidArgument for the first agent's limit its model's window cannot hold. `checkpoints`:
    the windows known of the checkpoints the spec names (by id); the rest are not checked."""
    if facts.type not in EPISODE_JOB_TYPES:
        return
    numbers = {number.path: int(number.value) for number in facts.numbers}
    for agent in (facts.policy, *facts.agents):
        context = _context_of(agent, checkpoints or {}) if agent is not None else None
        if context is not None:
            _check_agent(agent.path, numbers, context)


def _context_of(agent: AgentFacts, checkpoints: Mapping[str, ModelContext]) -> ModelContext | None:
    if agent.builtin_model:
        return builtin_context(agent.builtin_model)
    return checkpoints.get(agent.checkpoint_id) if agent.checkpoint_id else None


def _check_agent(path: str, numbers: Mapping[str, int], context: ModelContext) -> None:
    """The smaller of the turn limits applies (proto: AgentLoopLimits.max_new_tokens_per_turn)."""
    turn_limits = [(numbers[f"{path}.{name}"], f"{path}.{name}") for name in TURN_LIMITS
                   if numbers.get(f"{path}.{name}", 0) > 0]
    if turn_limits:
        tokens, field = min(turn_limits)
        if tokens >= context.tokens:
            raise InvalidArgument(field, f"{tokens} new tokens per turn do not fit the context of "
                                  f"{context.describe()}, the prompt included): use at most {context.tokens - 1}")
    episode = numbers.get(f"{path}.{EPISODE_LIMIT}", 0)
    if episode > context.tokens:
        raise InvalidArgument(f"{path}.{EPISODE_LIMIT}", f"{episode} tokens per episode do not fit the context "
                              f"of {context.describe()}): use at most {context.tokens} (0 = the context itself)")
