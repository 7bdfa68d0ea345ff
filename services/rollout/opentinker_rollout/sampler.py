"""Plain generation for prompts (the Sample RPC): every prompt goes through the policy's batcher,
so Sample calls batch together with running episodes."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opentinker_rollout.engine import FinishReason, GenerationRequest, SamplingConfig
from opentinker_rollout.errors import InvalidArgument
from opentinker_rollout.policies import LoadedPolicy


@dataclass(frozen=True, kw_only=True)
class Prompt:
    """Token ids, or chat messages rendered with the chat template and generation prompt."""

    token_ids: tuple[int, ...] | None = None
    messages: tuple[Mapping[str, str], ...] | None = None


@dataclass(frozen=True, kw_only=True)
class Completion:
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: FinishReason
    policy_version: int


@dataclass(frozen=True, kw_only=True)
class PromptCompletions:
    completions: tuple[Completion, ...]
    prompt_length: int


async def sample(policy: LoadedPolicy, prompts: Sequence[Prompt],
                 sampling: SamplingConfig) -> list[PromptCompletions]:
    """`sampling.n` completions per prompt, in prompt order."""
    if not prompts:
        raise InvalidArgument("prompts", "at least one prompt is required")
    prompt_ids = [_prompt_ids(policy, prompt, f"prompts[{i}]") for i, prompt in enumerate(prompts)]
    answers = await asyncio.gather(*(
        policy.generator.generate(GenerationRequest(prompt_ids=ids, sampling=sampling))
        for ids in prompt_ids))
    return [PromptCompletions(prompt_length=len(ids), completions=tuple(
        Completion(token_ids=g.token_ids, logprobs=g.logprobs, finish_reason=g.finish_reason,
                   text=policy.renderer.action_text(g.token_ids),
                   policy_version=answer.policy_version) for g in answer.generations))
        for ids, answer in zip(prompt_ids, answers, strict=True)]


def _prompt_ids(policy: LoadedPolicy, prompt: Prompt, where: str) -> tuple[int, ...]:
    if prompt.messages is not None:
        if not prompt.messages:
            raise InvalidArgument(f"{where}.messages", "at least one message is required")
        return tuple(policy.renderer.prompt([dict(m) for m in prompt.messages]))
    if not prompt.token_ids:
        raise InvalidArgument(where, "set tokens (non-empty) or messages")
    vocab = policy.model_info.vocab_size
    bad = [t for t in prompt.token_ids if not 0 <= t < vocab]
    if bad:
        raise InvalidArgument(f"{where}.tokens", f"token id {bad[0]} is outside the vocabulary "
                              f"[0, {vocab})")
    return prompt.token_ids
