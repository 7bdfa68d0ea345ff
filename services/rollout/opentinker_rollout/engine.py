"""The inference engine interface: token ids in, sampled token ids and their logprobs out.

An engine is synchronous and not thread-safe: the batcher calls `generate` from one worker
thread at a time with every request it gathered. Each request asks for `n` samples; the
answer holds, per request, its n `Generation`s in order.

Logprobs are those of the distribution actually sampled from, after temperature, top-k and
top-p renormalisation (see `opentinker_rollout.sampling`); with temperature 1 and no top-k/top-p
they equal the model's log_softmax. Greedy decoding (temperature 0) reports the model's plain
log_softmax of the chosen token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol


class FinishReason(StrEnum):
    """Why one generation ended."""

    STOP = "stop"          # a stop token (eos included) or stop string was produced; it is kept
    LENGTH = "length"      # max_new_tokens were generated
    CONTEXT = "context"    # the model's context window is full


@dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """How to sample. temperature 0 = greedy; top_k 0 and top_p 0 or 1 disable the filters."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end a generation, besides the model's eos ids."""
    stop_strings: tuple[str, ...] = ()
    """Generation ends once the decoded text contains one of these (the string is kept)."""
    n: int = 1
    seed: int = 0
    """0 = unseeded. Sample j of a request uses derive_seed(seed, j)."""

    def __post_init__(self) -> None:
        problems = [text for bad, text in (
            (self.max_new_tokens < 0, "max_new_tokens must be >= 0"),
            (self.temperature < 0, "temperature must be >= 0"),
            (not 0 <= self.top_p <= 1, "top_p must be in [0, 1]"),
            (self.top_k < 0, "top_k must be >= 0"),
            (self.n < 1, "n must be >= 1")) if bad]
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True, kw_only=True)
class GenerationRequest:
    """One prompt (token ids, already rendered) and how to continue it."""

    prompt_ids: tuple[int, ...]
    sampling: SamplingConfig
    adapter: str = ""
    """The LoRA adapter to generate with ("" = the model as loaded). Requests with different
    adapters of one base model share a batch: each row runs its own adapter."""
    prompt_logprobs: bool = False
    """Also compute each prompt token's logprob (see `Generation.prompt_logprobs`)."""


@dataclass(frozen=True, kw_only=True)
class Generation:
    """One sample: the new token ids, each one's logprob, and why it ended."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    prompt_logprobs: tuple[float, ...] = ()
    """When the request asked for them: per prompt token, log p(prompt[t] | prompt[:t]) under the
    weights that sampled the first token, at temperature 1 (the model's own log_softmax, whatever
    the sampling parameters), from an independent float32 forward of the prompt; index 0 is 0 (no
    context). The same tuple on each of the request's n generations; empty when not asked."""


class Engine(Protocol):
    """What the batcher and the agent loop need from an inference engine."""

    @property
    def max_context_length(self) -> int:
        """Most tokens (prompt + generated) one sequence may hold."""

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Token ids that always end a generation."""

    @property
    def supports_prompt_logprobs(self) -> bool:
        """Whether requests may set `prompt_logprobs`."""

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Generation]]:
        """For each request, its `sampling.n` generations (blocking; runs in a worker thread)."""

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of token ids, special tokens included (what the environment sees)."""


class TokenizerEngineBase:
    """What every engine over a Hugging Face tokenizer answers the same way."""

    tokenizer: Any
    _max_context: int
    _eos_ids: tuple[int, ...]
    supports_prompt_logprobs: bool = False

    @property
    def max_context_length(self) -> int:
        return self._max_context

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos_ids

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)


MASK64 = (1 << 64) - 1


def derive_seed(seed: int, *indices: int) -> int:
    """A well-mixed non-zero 63-bit seed from a base seed and indices (splitmix64)."""
    value = seed & MASK64
    for index in indices:
        value = _splitmix64((value ^ _splitmix64(index + 0x9E3779B97F4A7C15)) & MASK64)
    return (_splitmix64(value) >> 1) or 1


def _splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)
