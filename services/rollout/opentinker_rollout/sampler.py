"""Plain generation for prompts (the Sample RPC): every prompt goes through the policy's batcher,
so Sample calls batch together with running episodes.

With `prompt_logprobs`, each prompt's tokens are also scored under the policy (temperature 1,
see `Generation.prompt_logprobs`): once per prompt, whatever `sampling.n`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opentinker_rollout.engine import FinishReason, GenerationRequest, SamplingConfig
from opentinker_rollout.errors import FailedPrecondition, InvalidArgument
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
    prompt_logprobs: tuple[float, ...] = ()
    """Per prompt token, log p(prompt[t] | prompt[:t]) (index 0 = 0); empty unless asked for."""


async def sample(policy: LoadedPolicy, prompts: Sequence[Prompt], sampling: SamplingConfig, *,
                 prompt_logprobs: bool = False) -> list[PromptCompletions]:
    """`sampling.n` completions per prompt, in prompt order (and, if asked, each prompt's logprobs)."""
    if not prompts:
        raise InvalidArgument("prompts", "at least one prompt is required")
    prompt_ids = [_prompt_ids(policy, prompt, f"prompts[{i}]") for i, prompt in enumerate(prompts)]
    if prompt_logprobs:
        _check_prompt_logprobs(policy, prompt_ids)
    answers = await asyncio.gather(*(
        policy.generator.generate(GenerationRequest(prompt_ids=ids, sampling=sampling,
                                                    prompt_logprobs=prompt_logprobs))
        for ids in prompt_ids))
    return [PromptCompletions(prompt_length=len(ids), prompt_logprobs=answer.generations[0].prompt_logprobs,
                              completions=tuple(
        Completion(token_ids=g.token_ids, logprobs=g.logprobs, finish_reason=g.finish_reason,
                   text=policy.renderer.action_text(g.token_ids),
                   policy_version=answer.policy_version) for g in answer.generations))
        for ids, answer in zip(prompt_ids, answers, strict=True)]


def _check_prompt_logprobs(policy: LoadedPolicy, prompt_ids: Sequence[tuple[int, ...]]) -> None:
    """The engine can score prompts, and each prompt fits its context window (one forward)."""
    if not getattr(policy.engine, "supports_prompt_logprobs", False):
        raise FailedPrecondition("prompt_logprobs: this policy's engine cannot return prompt logprobs; "
                                 "load the policy with ENGINE_TRANSFORMERS")
    limit = policy.engine.max_context_length
    for i, ids in enumerate(prompt_ids):
        if len(ids) > limit:
            raise InvalidArgument(f"prompts[{i}]", f"has {len(ids)} tokens, more than the model's context "
                                  f"window ({limit}): prompt_logprobs need the whole prompt in one forward")


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
