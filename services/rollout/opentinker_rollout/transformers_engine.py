"""A transformers causal LM as an `Engine`, with its own batched sampling loop.

Every row (request x sample) decodes in a `DecodeBatch`: prompts are left-padded, the
attention mask marks real tokens and position ids count real tokens only, so a padded row
computes what it would alone. The prompt is encoded once; each following step feeds one
token per row and reuses the KV cache (`past_key_values`). Rows of requests naming different
LoRA adapters of a peft model share the batch: peft applies each row's own adapter
(`adapter_names`), so one forward serves several jobs' policies. Rows stop independently (stop
token, stop string, max_new_tokens, context window) and leave the batch and the cache.

Two ways in: `generate(requests)` decodes a batch of its own to the end; `advance(admit)` is
continuous batching for the batcher: one step of the engine's running batch, which admitted
requests join at once (see `opentinker_rollout.decode_batch`).

Prompt logprobs (`GenerationRequest.prompt_logprobs`) come from a forward of their own, when the
request is admitted (the weights that sample its first token): the prompt alone, no KV cache
shared with any row, all positions' logits in float32, temperature 1 (`opentinker_runtime.ml.logprobs`,
the Trainer's convention). Each distinct (adapter, prompt) of a step is computed once, several
left-padded in one forward up to `PROMPT_LOGPROB_TOKENS` padded tokens. The decode path is not
touched: requests without them cost nothing more.
"""

from __future__ import annotations

import secrets
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from opentinker_runtime.ml.logprobs import logprobs_from_logits
from opentinker_rollout.engine import (
    FinishReason,
    Generation,
    GenerationRequest,
    TokenizerEngineBase,
    derive_seed,
)
from opentinker_rollout.decode_batch import DecodeBatch, PromptKey, left_pad
from opentinker_rollout.sampling import row_params, sample_tokens

BASE_ADAPTER = "__base__"
"""peft's name for "no adapter" in a mixed-adapter batch."""
PROMPT_LOGPROB_TOKENS = 2048
"""Most padded prompt tokens in one prompt-logprob forward (bounds its [B, T, V] float32 logits;
a longer prompt goes alone)."""

_registered_parameters = [0]
"""Parameters registered on any module of this process so far (torch's global hook): a model
that gains or replaces parameters (a new LoRA adapter, weights loaded with assign) moves it."""


def _count_registration(module: torch.nn.Module, name: str, parameter: torch.nn.Parameter) -> None:
    _registered_parameters[0] += 1


torch.nn.modules.module.register_module_parameter_registration_hook(_count_registration)


@dataclass(kw_only=True)
class _Row:
    """Decoding state of one sample."""

    prompt_ids: tuple[int, ...]
    budget: int
    budget_reason: FinishReason
    temperature: float
    top_k: int
    top_p: float
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    generator: torch.Generator
    adapter: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None
    prompt_logprobs: tuple[float, ...] = ()

    @property
    def finished(self) -> bool:
        return self.finish is not None

    def result(self) -> Generation:
        return Generation(token_ids=tuple(self.token_ids), logprobs=tuple(self.logprobs),
                          finish_reason=self.finish or self.budget_reason,
                          prompt_logprobs=self.prompt_logprobs)


class TransformersEngine(TokenizerEngineBase):
    """Engine over a (possibly peft-wrapped) transformers causal LM and its tokenizer."""

    supports_prompt_logprobs = True

    def __init__(self, model: torch.nn.Module, tokenizer: object, *,
                 max_context_length: int | None = None,
                 eos_token_ids: tuple[int, ...] | None = None) -> None:
        """`eos_token_ids` None = the tokenizer's and the generation config's eos ids."""
        self.model = model
        self.tokenizer = tokenizer
        config = _base_config(model)
        self._max_context = max_context_length or int(config.max_position_embeddings)
        self._eos_ids = _eos_ids(model, tokenizer) if eos_token_ids is None else eos_token_ids
        self._pad_id = _pad_id(tokenizer, self._eos_ids)
        self._parameters: list[torch.nn.Parameter] = []
        self._parameters_seen = -1
        self._running = self._decode_batch()
        self._open: dict[Hashable, list[_Row]] = {}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Generation]]:
        """Decode every request to the end in a batch of its own."""
        rows_per_request = [self._rows(request) for request in requests]
        batch = self._decode_batch()
        with torch.inference_mode():
            self._attach_prompt_logprobs(list(zip(requests, rows_per_request, strict=True)))
            batch.advance([row for group in rows_per_request for row in group if not row.finished])
            while len(batch):
                batch.advance([])
        return [[row.result() for row in group] for group in rows_per_request]

    @property
    def running_rows(self) -> int:
        """Rows of the continuous batch still decoding."""
        return len(self._running)

    def advance(self, admit: Sequence[tuple[Hashable, GenerationRequest]]
                ) -> list[tuple[Hashable, list[Generation]]]:
        """One step of the continuous batch: the running rows decode a token, the admitted
        requests (keyed by the caller) are prefilled and join; returns the requests whose
        rows have all finished, with their generations."""
        new_rows: list[_Row] = []
        for key, request in admit:
            self._open[key] = self._rows(request)
            new_rows += [row for row in self._open[key] if not row.finished]
        with torch.inference_mode():
            self._attach_prompt_logprobs([(request, self._open[key]) for key, request in admit])
            self._running.advance(new_rows)
        done = [key for key, rows in self._open.items() if all(row.finished for row in rows)]
        return [(key, [row.result() for row in self._open.pop(key)]) for key in done]

    def abort(self, keys: Sequence[Hashable]) -> None:
        """Stop decoding these requests (their callers left); they are not returned."""
        for key in keys:
            for row in self._open.pop(key, []):
                row.finish = row.finish or row.budget_reason
        self._running.drop_finished()

    def reset(self) -> None:
        """Forget the continuous batch (after a failed step left it in an unknown state)."""
        self._running = self._decode_batch()
        self._open.clear()

    def _decode_batch(self) -> DecodeBatch:
        return DecodeBatch(self._forward, self._sample, self._pad_id, weights_version=self._weights_version)

    def _weights_version(self) -> Hashable:
        """Changes whenever a parameter is written in place (torch counts each tensor's in-place
        writes), gets other storage, or the process registers parameters (a new adapter): a
        running row's prompt KV is reused only while this stays the same."""
        if self._parameters_seen != _registered_parameters[0]:  # walking the modules is slow
            self._parameters = list(self.model.parameters())
            self._parameters_seen = _registered_parameters[0]
        try:
            return self._parameters_seen, tuple((p.data_ptr(), p._version) for p in self._parameters)
        except RuntimeError:  # inference tensors count nothing: never reuse
            return object()

    def _forward(self, input_ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor,
                 cache: DynamicCache, rows: Sequence[_Row]) -> torch.Tensor:
        device = self.model.device
        adapters = _adapters(rows)
        extra = {} if adapters is None else {"adapter_names": adapters}
        output = self.model(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                            position_ids=positions.to(device), past_key_values=cache,
                            use_cache=True, logits_to_keep=1, **extra)
        return output.logits[:, -1, :].float().cpu()

    def _attach_prompt_logprobs(self, requests: Sequence[tuple[GenerationRequest, list[_Row]]]) -> None:
        """Give the rows of each request that asks for them its prompt's logprobs."""
        keys = list(dict.fromkeys((request.adapter, request.prompt_ids)
                                  for request, _ in requests if request.prompt_logprobs))
        if not keys:
            return
        computed = self._prompt_logprobs(keys)
        for request, rows in requests:
            if request.prompt_logprobs:
                for row in rows:
                    row.prompt_logprobs = computed[request.adapter, request.prompt_ids]

    def _prompt_logprobs(self, keys: list[PromptKey]) -> dict[PromptKey, tuple[float, ...]]:
        """Each (adapter, prompt)'s per-token logprobs, index 0 = 0, from forwards of their own."""
        computed: dict[PromptKey, tuple[float, ...]] = {}
        for chunk in _token_bounded_chunks(keys, PROMPT_LOGPROB_TOKENS):
            input_ids, attention, positions = left_pad([prompt for _, prompt in chunk], self._pad_id)
            logits_B_T_V = self._all_logits(input_ids, attention, positions, [adapter for adapter, _ in chunk])
            logprobs_B_T = logprobs_from_logits(logits_B_T_V, input_ids.to(logits_B_T_V.device),
                                                attention.to(logits_B_T_V.device)).cpu()
            for row, key in enumerate(chunk):
                computed[key] = tuple(logprobs_B_T[row, input_ids.shape[1] - len(key[1]):].tolist())
        return computed

    def _all_logits(self, input_ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor,
                    adapters: Sequence[str]) -> torch.Tensor:
        """float32 logits [B, T, V] of every position of left-padded prompts, no cache."""
        device = self.model.device
        names = None if not any(adapters) else [adapter or BASE_ADAPTER for adapter in adapters]
        extra = {} if names is None else {"adapter_names": names}
        output = self.model(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                            position_ids=positions.to(device), use_cache=False, **extra)
        return output.logits.float()

    def _rows(self, request: GenerationRequest) -> list[_Row]:
        sampling = request.sampling
        room = self._max_context - len(request.prompt_ids)
        budget = max(0, min(sampling.max_new_tokens, room))
        reason = FinishReason.LENGTH if sampling.max_new_tokens <= room else FinishReason.CONTEXT
        base_seed = sampling.seed or secrets.randbits(63)
        return [_Row(prompt_ids=request.prompt_ids, budget=budget, budget_reason=reason,
                     finish=None if budget > 0 else reason,
                     temperature=sampling.temperature, top_k=sampling.top_k,
                     top_p=sampling.top_p, stop_strings=sampling.stop_strings,
                     stop_ids=frozenset(self._eos_ids + sampling.stop_token_ids),
                     generator=torch.Generator().manual_seed(derive_seed(base_seed, j)),
                     adapter=request.adapter)
                for j in range(sampling.n)]

    def _sample(self, rows: list[_Row], logits_B_V: torch.Tensor) -> torch.Tensor:
        params = row_params([r.temperature for r in rows], [r.top_k for r in rows],
                            [r.top_p for r in rows])
        tokens_B, logprobs_B = sample_tokens(logits_B_V, params, [r.generator for r in rows])
        for row, token, logprob in zip(rows, tokens_B.tolist(), logprobs_B.tolist(), strict=True):
            self._append(row, token, logprob)
        return tokens_B

    def _append(self, row: _Row, token: int, logprob: float) -> None:
        row.token_ids.append(token)
        row.logprobs.append(logprob)
        if token in row.stop_ids or self._hit_stop_string(row):
            row.finish = FinishReason.STOP
        elif len(row.token_ids) >= row.budget:
            row.finish = row.budget_reason

    def _hit_stop_string(self, row: _Row) -> bool:
        if not row.stop_strings:
            return False
        text = self.decode(row.token_ids)
        return any(stop in text for stop in row.stop_strings)


def _adapters(rows: Sequence[_Row]) -> list[str] | None:
    """peft's per-row adapter names (a mixed batch), or None when no row names an adapter."""
    if not any(row.adapter for row in rows):
        return None
    return [row.adapter or BASE_ADAPTER for row in rows]


def _token_bounded_chunks(keys: list[PromptKey], max_tokens: int) -> list[list[PromptKey]]:
    """Consecutive groups of prompts whose padded size (count x longest) stays within
    `max_tokens`; a longer prompt is a group of its own."""
    chunks: list[list[PromptKey]] = []
    longest = 0
    for key in keys:
        widest = max(longest, len(key[1]))
        if chunks and widest * (len(chunks[-1]) + 1) <= max_tokens:
            chunks[-1].append(key)
            longest = widest
        else:
            chunks.append([key])
            longest = len(key[1])
    return chunks


def _base_config(model: torch.nn.Module) -> object:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.config


def _eos_ids(model: torch.nn.Module, tokenizer: object) -> tuple[int, ...]:
    ids: list[int] = []
    for value in (getattr(tokenizer, "eos_token_id", None),
                  getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        ids.extend(value if isinstance(value, list) else [] if value is None else [value])
    return tuple(dict.fromkeys(int(i) for i in ids))


def _pad_id(tokenizer: object, eos_ids: tuple[int, ...]) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is not None:
        return int(pad)
    return eos_ids[0] if eos_ids else 0
