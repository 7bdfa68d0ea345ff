"""An optional vLLM engine behind the `Engine` interface (GPU machines only).

vllm is not a dependency of the Rollout service: it is imported inside `VllmEngine.__init__`,
so this module imports everywhere, and `available()` says whether vllm can be imported.
Constructing the engine without it raises `VllmUnavailableError`, which says what to install.

Semantics mirror `TransformersEngine`:

* One vLLM request per sample (`SamplingParams(n=1)`): sample j of a request is its own
  request with seed `derive_seed(seed, j)`, as in the transformers engine (vLLM's own n > 1
  would seed child i with `seed + i`, and rejects n > 1 when greedy). Seed 0 = unseeded:
  the request gets `seed=None` and draws from vLLM's engine-wide generator. Prefix caching
  (on by default in V1) shares the prompt's KV blocks between the n copies. Seeds are
  reproducible within vLLM, but vLLM samples with its own algorithm (exponential race on
  the GPU), so a seeded sample is not token-identical to the transformers engine's.
* max_tokens = min(max_new_tokens, context room); a sample with no budget is answered
  empty without calling vLLM (vLLM rejects max_tokens < 1). The finish reason is CONTEXT
  when the context window, not max_new_tokens, cut the budget.
* Stops: `stop_token_ids` = the engine's eos ids + the request's stop ids, with
  `ignore_eos=True`, so the engine's `eos_token_ids` is the single source of truth (vLLM
  would otherwise add the tokenizer's and the generation config's eos ids on its own). The
  stop token is kept in the output. Stop strings are kept in the output text
  (`include_stop_str_in_output=True`) and checked on text decoded with special tokens
  (`skip_special_tokens=False`), like `TransformersEngine.decode`; detokenization is only
  switched on when a request has stop strings (vLLM needs it for them).
* greedy (temperature 0) -> `temperature=0.0`; top_k 0 -> -1 (off: accepted by every
  version; recent ones also take 0); top_p 0 or 1 -> 1.0 (vLLM requires top_p in (0, 1]).

The logprob contract (see `opentinker_rollout.sampling`): a sampled token's logprob comes
from the distribution actually sampled from, after temperature, top-k and top-p; greedy
reports the plain log_softmax of the argmax. vLLM gives this with the engine option
`logprobs_mode="processed_logprobs"` and the request option `logprobs=0` (the sampled
token's logprob only). In the V1 sampler a processed logprob is `log_softmax` of the logits
after temperature, then top-k/top-p masking (-inf outside); an all-greedy batch returns
`log_softmax` of the unscaled logits, and a greedy row in a mixed batch uses temperature
1.0 with top-k/top-p reset by SamplingParams, i.e. plain log_softmax too.

Sources (read through the stored public copies of vllm-project/vllm):

* `logprobs_mode` (`vllm/config/model.py`, `LogprobsMode = Literal["raw_logits",
  "raw_logprobs", "processed_logits", "processed_logprobs"]`, default "raw_logprobs"):
  introduced in v0.10.0 (PR #21398, "logprobs mode for selecting which stage of logprobs
  to return" in the v0.10.0 release notes), where "processed" still meant before
  temperature/top-k/top-p. PR #22387 ("[Sampler] Support returning final logprobs", merged
  2025-08-06) made processed_* the final values after temperature and top-k/top-p, hence
  `MIN_VLLM_VERSION` 0.10.2 (the first release TRL's PR #4163 relies on for the same).
  GAP: with an older vLLM the reported logprobs would be raw (pre-temperature) ones.
* `vllm/v1/sample/sampler.py` (`Sampler.sample`: all-greedy path computes
  `compute_logprobs(logits)`; mixed batch `apply_temperature` replaces temperature < 1e-5
  by 1.0) and `vllm/v1/sample/ops/topk_topp_sampler.py` (`forward_native` returns
  `log_softmax` of the top-k/top-p-masked logits; FlashInfer is bypassed in processed modes).
* `vllm/sampling_params.py` (`SamplingParams`: n, temperature, top_p in (0, 1], top_k
  0 or -1 = off, seed (None = unseeded), stop, stop_token_ids, ignore_eos,
  include_stop_str_in_output, max_tokens >= 1, logprobs, detokenize, skip_special_tokens;
  "n must be 1 when using greedy sampling"; temperatures in (0, 0.01) are raised to 0.01).
* `vllm/entrypoints/llm.py` (`LLM(model, ..., **EngineArgs)`, `LLM.generate(prompts,
  sampling_params: SamplingParams | Sequence[SamplingParams], *, use_tqdm, lora_request)`,
  outputs in input order), `vllm/inputs` (`TokensPrompt`, a TypedDict with
  `prompt_token_ids`), `vllm/outputs.py` (`RequestOutput.outputs[i]`: `CompletionOutput`
  with `token_ids`, `logprobs: list[dict[int, Logprob]]` (`.logprob`), `finish_reason`
  "stop" / "length"), `vllm/lora/request.py` (`LoRARequest(lora_name, lora_int_id,
  lora_path)`; engine options `enable_lora`, `max_lora_rank`, `max_loras`),
  `vllm/v1/core/sched/utils.py` (`check_stop`: stop tokens are checked before the length cap).

Prompt logprobs (`GenerationRequest.prompt_logprobs`) are not offered (`supports_prompt_logprobs`
is False; the Sample RPC answers FAILED_PRECONDITION before queuing): vLLM's `prompt_logprobs`
option could give them, but whether its values honour `logprobs_mode` and the request's
temperature cannot be checked here, and the contract is the model's temperature-1 distribution.

Known gaps against TransformersEngine (none verifiable here, where vllm is not installed):
temperatures in (0, 0.01) are raised to 0.01 by vLLM, and recent versions reject
temperatures above 2; vLLM's top-k keeps every token tied with the k-th logit (ours keeps
exactly k); stop strings are found by vLLM's incremental detokenizer (same text in the
usual case, may differ inside an incomplete multi-byte character); vLLM rejects empty
prompts (checked here with a clear error) and computes in the model's dtype on the GPU,
so logprobs match the CPU float32 engine only to a tolerance.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentinker_rollout.engine import (FinishReason, Generation, GenerationRequest,
                                       SamplingConfig, TokenizerEngineBase, derive_seed)

MIN_VLLM_VERSION = "0.10.2"
LOGPROBS_MODE = "processed_logprobs"
TOP_K_OFF = -1
INSTALL_HINT = "install the optional extra opentinker-rollout[vllm] on a machine with a GPU"


class VllmUnavailableError(RuntimeError):
    """vllm cannot be imported here, or is too old for the logprob contract."""


class VllmGenerationError(RuntimeError):
    """vLLM answered something this engine cannot turn into a Generation."""


def available() -> bool:
    """Whether a usable vllm (importable, recent enough) is installed here."""
    try:
        _import_vllm()
    except VllmUnavailableError:
        return False
    return True


def _import_vllm() -> Any:
    try:
        import vllm
    except (ImportError, OSError, RuntimeError) as error:  # absent, or a broken CUDA install
        message = f"vllm cannot be imported here ({error}); {INSTALL_HINT}"
        raise VllmUnavailableError(message) from error
    check_version(getattr(vllm, "__version__", "0"))
    return vllm


def check_version(version: str) -> None:
    """Raise VllmUnavailableError for a vllm older than MIN_VLLM_VERSION."""
    from packaging.version import InvalidVersion, Version
    try:  # release numbers only: a 0.10.2 dev or rc build already has the processed logprobs
        too_old = Version(version).release < Version(MIN_VLLM_VERSION).release
    except InvalidVersion:
        too_old = False  # a source build with a local version string: trust it
    if too_old:
        raise VllmUnavailableError(
            f"vllm {version} reports pre-temperature logprobs; need vllm>={MIN_VLLM_VERSION}: "
            f"{INSTALL_HINT}")


# ---- pure mapping functions (no vllm needed) -------------------------------------------------

def token_budget(max_new_tokens: int, context_room: int) -> tuple[int, bool]:
    """(tokens a sample may generate, whether the context window rather than
    max_new_tokens set that budget), as in TransformersEngine."""
    return max(0, min(max_new_tokens, context_room)), max_new_tokens > context_room


def sample_seed(seed: int, sample_index: int) -> int | None:
    """vLLM seed of sample j: derive_seed(seed, j); None (unseeded) when seed is 0."""
    return derive_seed(seed, sample_index) if seed else None


def sampling_params_kwargs(config: SamplingConfig, sample_index: int, *, context_room: int,
                           eos_token_ids: Sequence[int] = ()) -> dict[str, Any]:
    """`vllm.SamplingParams` keyword arguments for sample `sample_index` of a request.

    One SamplingParams (n=1) per sample. max_tokens may be 0: the caller must not send such
    a sample to vLLM (see `token_budget`).
    """
    if not 0 <= sample_index < config.n:
        raise ValueError(f"sample_index {sample_index} is outside 0..{config.n - 1}")
    greedy = config.temperature <= 0
    return {
        "n": 1,
        "temperature": 0.0 if greedy else config.temperature,
        "top_k": config.top_k if config.top_k > 0 and not greedy else TOP_K_OFF,
        "top_p": config.top_p if 0 < config.top_p < 1 and not greedy else 1.0,
        "seed": sample_seed(config.seed, sample_index),
        "max_tokens": token_budget(config.max_new_tokens, context_room)[0],
        "ignore_eos": True,
        "stop_token_ids": list(dict.fromkeys([*eos_token_ids, *config.stop_token_ids])),
        "stop": list(config.stop_strings),
        "include_stop_str_in_output": True,
        "logprobs": 0,
        "detokenize": bool(config.stop_strings),
        "skip_special_tokens": False,
    }


def finish_reason(vllm_reason: str | None, *, hit_context: bool,
                  last_token: int | None = None,
                  stop_token_ids: Sequence[int] = ()) -> FinishReason:
    """Our FinishReason for vLLM's "stop" / "length".

    "length" becomes CONTEXT when the context window set the budget. A generation whose
    last token is a stop token is STOP whatever vLLM says (older versions checked the length
    cap first), as in TransformersEngine.
    """
    if vllm_reason == "stop" or (last_token is not None and last_token in stop_token_ids):
        return FinishReason.STOP
    if vllm_reason == "length":
        return FinishReason.CONTEXT if hit_context else FinishReason.LENGTH
    raise VllmGenerationError(f"vLLM ended a generation with finish_reason={vllm_reason!r} "
                              "(expected 'stop' or 'length'; was the request aborted?)")


def sampled_logprob(entry: Mapping[int, Any], token_id: int) -> float:
    """The sampled token's logprob from one position's {token id: Logprob} map."""
    try:
        value = entry[token_id]
    except (KeyError, TypeError):
        message = f"vLLM returned no logprob for sampled token {token_id} (was logprobs=0 set?)"
        raise VllmGenerationError(message) from None
    return float(getattr(value, "logprob", value))


def to_generation(token_ids: Sequence[int], logprob_entries: Sequence[Mapping[int, Any]] | None,
                  vllm_finish_reason: str | None, *, hit_context: bool,
                  stop_token_ids: Sequence[int] = ()) -> Generation:
    """Our Generation from a vLLM CompletionOutput's token_ids, logprobs and finish_reason."""
    tokens = tuple(int(t) for t in token_ids)
    entries = list(logprob_entries or [])
    if len(entries) != len(tokens):
        raise VllmGenerationError(f"vLLM returned {len(entries)} logprob entries for "
                                  f"{len(tokens)} tokens (was logprobs=0 set?)")
    return Generation(
        token_ids=tokens,
        logprobs=tuple(sampled_logprob(e, t) for e, t in zip(entries, tokens, strict=True)),
        finish_reason=finish_reason(vllm_finish_reason, hit_context=hit_context,
                                    last_token=tokens[-1] if tokens else None,
                                    stop_token_ids=stop_token_ids))


def llm_kwargs(model_dir: str | Path, *, max_context_length: int, enable_lora: bool,
               max_lora_rank: int, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`vllm.LLM` keyword arguments; `extra` (e.g. dtype, gpu_memory_utilization) wins."""
    kwargs: dict[str, Any] = {
        "model": str(model_dir),
        "max_model_len": max_context_length,
        "logprobs_mode": LOGPROBS_MODE,
        # the model directory's generation_config.json must not add defaults or limits
        "generation_config": "vllm",
    }
    if enable_lora:
        kwargs |= {"enable_lora": True, "max_lora_rank": max_lora_rank, "max_loras": 1}
    return kwargs | dict(extra or {})


# ---- the engine ------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class _Sample:
    """One vLLM request: a prompt, its SamplingParams kwargs and how its budget was set."""

    prompt_ids: tuple[int, ...]
    params: dict[str, Any]
    hit_context: bool
    lora: Any = None

    @property
    def live(self) -> bool:
        return self.params["max_tokens"] > 0


class VllmEngine(TokenizerEngineBase):
    """Engine over a `vllm.LLM` loaded from a local HF model directory, with LoRA adapters.

    A request's `adapter` name (if the request has one) picks a LoRA loaded with
    `load_adapter`; vLLM batches requests of different adapters together (`lora_request` is
    given per prompt).

    The tokenizer, the eos ids and the default context length come from the directory through
    transformers, as for TransformersEngine; vLLM is told the same `max_model_len`.
    """

    def __init__(self, model_dir: str | Path, *, max_context_length: int | None = None,
                 eos_token_ids: Sequence[int] | None = None, adapter_dir: str | Path | None = None,
                 enable_lora: bool = False, max_lora_rank: int = 16,
                 llm_options: Mapping[str, Any] | None = None) -> None:
        """`eos_token_ids` None = the tokenizer's and the generation config's eos ids.
        `adapter_dir` (a peft LoRA directory, used for requests naming no adapter) implies
        `enable_lora`; `llm_options` go to `vllm.LLM` as they are (dtype, max_loras, ...)."""
        self._vllm = _import_vllm()
        from transformers import AutoConfig, AutoTokenizer
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        self._max_context = max_context_length or int(config.max_position_embeddings)
        self._eos_ids = (_eos_ids(model_dir, self.tokenizer, config) if eos_token_ids is None
                         else tuple(int(i) for i in eos_token_ids))
        self._lora_enabled = enable_lora or adapter_dir is not None
        self.llm = self._vllm.LLM(**llm_kwargs(
            model_dir, max_context_length=self._max_context, enable_lora=self._lora_enabled,
            max_lora_rank=max_lora_rank, extra=llm_options))
        self._adapter_ids = itertools.count(1)
        self._loras: dict[str, Any] = {}
        if adapter_dir is not None:
            self.load_adapter("", adapter_dir)

    def load_adapter(self, name: str, adapter_dir: str | Path) -> None:
        """Serve requests whose `adapter` is `name` with the peft LoRA in `adapter_dir`
        ("" = requests naming no adapter; without one they run the base model).

        Each call gets a new vLLM adapter id, so new weights written to the same directory
        are loaded rather than served from vLLM's adapter cache.
        """
        if not self._lora_enabled:
            raise ValueError("this VllmEngine was built without enable_lora")
        from vllm.lora.request import LoRARequest
        adapter_id = next(self._adapter_ids)
        self._loras[name] = LoRARequest(f"{name or 'default'}-{adapter_id}", adapter_id,
                                        str(adapter_dir))

    def unload_adapter(self, name: str) -> None:
        """Forget adapter `name` (requests naming it are refused; "" = back to the base)."""
        self._loras.pop(name, None)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Generation]]:
        samples = [self._samples(request) for request in requests]
        live = [sample for group in samples for sample in group if sample.live]
        completions = iter(self._run(live))
        return [[self._result(sample, completions) for sample in group] for group in samples]

    def _samples(self, request: GenerationRequest) -> list[_Sample]:
        if not request.prompt_ids:
            raise ValueError("VllmEngine needs a non-empty prompt (vLLM rejects empty ones)")
        if request.prompt_logprobs:
            raise ValueError("VllmEngine does not return prompt logprobs (supports_prompt_logprobs is "
                             "False); use TransformersEngine")
        sampling = request.sampling
        room = self._max_context - len(request.prompt_ids)
        hit_context = token_budget(sampling.max_new_tokens, room)[1]
        lora = self._lora_for(getattr(request, "adapter", ""))
        return [_Sample(prompt_ids=request.prompt_ids, hit_context=hit_context, lora=lora,
                        params=sampling_params_kwargs(sampling, j, context_room=room,
                                                      eos_token_ids=self._eos_ids))
                for j in range(sampling.n)]

    def _lora_for(self, adapter: str) -> Any:
        if adapter and adapter not in self._loras:
            raise ValueError(f"no LoRA adapter named {adapter!r} is loaded in this VllmEngine")
        return self._loras.get(adapter)

    def _run(self, samples: list[_Sample]) -> list[Any]:
        """One blocking llm.generate over every live sample; its CompletionOutputs in order."""
        if not samples:
            return []
        prompts = [{"prompt_token_ids": list(s.prompt_ids)} for s in samples]  # TokensPrompt
        params = [self._vllm.SamplingParams(**s.params) for s in samples]
        loras = [s.lora for s in samples]  # one per prompt; None = the base model
        outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=loras)
        return [output.outputs[0] for output in outputs]

    @staticmethod
    def _result(sample: _Sample, completions: Any) -> Generation:
        if not sample.live:
            return to_generation((), (), "length", hit_context=sample.hit_context)
        completion = next(completions)
        return to_generation(completion.token_ids, completion.logprobs,
                             completion.finish_reason, hit_context=sample.hit_context,
                             stop_token_ids=sample.params["stop_token_ids"])


def _eos_ids(model_dir: str | Path, tokenizer: Any, config: Any) -> tuple[int, ...]:
    """The tokenizer's eos id and the generation config's, like TransformersEngine (whose
    model.generation_config falls back to the model config without generation_config.json)."""
    from transformers import GenerationConfig
    try:
        generation: Any = GenerationConfig.from_pretrained(model_dir, local_files_only=True)
    except OSError:
        generation = config
    ids: list[int] = []
    for value in (getattr(tokenizer, "eos_token_id", None),
                  getattr(generation, "eos_token_id", None)):
        ids.extend(value if isinstance(value, list) else [] if value is None else [value])
    return tuple(dict.fromkeys(int(i) for i in ids))
