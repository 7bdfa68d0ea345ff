"""The optional vLLM engine: the pure mapping from our sampling config to vLLM's SamplingParams
and from vLLM's outputs to Generations (run everywhere), the engine's plumbing over a fake
`vllm` module, the clear error without vllm, and an end-to-end comparison with the
transformers engine that only runs where vllm and a GPU are present."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from opentinker_runtime.ml.models import save_builtin_as_local
from opentinker_rollout import vllm_engine
from opentinker_rollout.engine import FinishReason, GenerationRequest, SamplingConfig, derive_seed
from opentinker_rollout.sampling import processed_logprobs, row_params
from opentinker_rollout.vllm_engine import (INSTALL_HINT, LOGPROBS_MODE, VllmEngine,
                                            VllmGenerationError, VllmUnavailableError,
                                            check_version, finish_reason, llm_kwargs,
                                            sampling_params_kwargs, to_generation, token_budget)
from tests.rollout._support import EOS, full_forward_logprobs, tiny_engine, tiny_model


@dataclass(frozen=True)
class Logprob:
    """What vLLM puts in a CompletionOutput's logprobs dicts (vllm.logprobs.Logprob)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


def kwargs(room: int = 1000, index: int = 0, eos: tuple[int, ...] = (), **sampling):
    return sampling_params_kwargs(SamplingConfig(**sampling), index, context_room=room,
                                  eos_token_ids=eos)


# ---- sampling_params_kwargs ------------------------------------------------------------------

def test_greedy_maps_to_temperature_0_with_the_filters_off():
    params = kwargs(temperature=0.0, top_k=5, top_p=0.5)
    assert (params["temperature"], params["top_k"], params["top_p"]) == (0.0, -1, 1.0)


def test_sampling_settings_pass_through_and_our_off_values_become_vllms():
    params = kwargs(temperature=0.7, top_k=20, top_p=0.9)
    assert (params["temperature"], params["top_k"], params["top_p"]) == (0.7, 20, 0.9)
    off = kwargs(temperature=1.0, top_k=0, top_p=0.0)
    assert (off["top_k"], off["top_p"]) == (-1, 1.0)  # vLLM: top_k -1 = off, top_p in (0, 1]
    assert kwargs(top_p=1.0)["top_p"] == 1.0


def test_each_sample_is_one_vllm_request_seeded_with_derive_seed():
    config = SamplingConfig(temperature=1.0, n=4, seed=1234)
    seeds = [sampling_params_kwargs(config, j, context_room=100)["seed"] for j in range(4)]
    assert seeds == [derive_seed(1234, j) for j in range(4)]
    assert len(set(seeds)) == 4
    assert all(sampling_params_kwargs(config, j, context_room=100)["n"] == 1 for j in range(4))
    assert seeds == [sampling_params_kwargs(config, j, context_room=100)["seed"] for j in range(4)]


def test_seed_0_is_unseeded():
    assert kwargs(seed=0, n=2, index=1)["seed"] is None


def test_sample_index_must_be_one_of_the_requests_samples():
    with pytest.raises(ValueError, match="sample_index"):
        kwargs(n=2, index=2)


def test_max_tokens_is_capped_by_the_context_room():
    assert kwargs(max_new_tokens=64, room=10)["max_tokens"] == 10
    assert kwargs(max_new_tokens=8, room=10)["max_tokens"] == 8
    assert kwargs(max_new_tokens=8, room=-3)["max_tokens"] == 0  # prompt longer than the window
    assert token_budget(64, 10) == (10, True)
    assert token_budget(10, 10) == (10, False)
    assert token_budget(0, 0) == (0, False)


def test_stop_strings_are_kept_and_checked_on_text_with_special_tokens():
    params = kwargs(stop_strings=("</answer>", "\n\n"))
    assert params["stop"] == ["</answer>", "\n\n"]
    assert params["include_stop_str_in_output"] is True
    assert params["detokenize"] is True and params["skip_special_tokens"] is False
    assert kwargs()["detokenize"] is False and kwargs()["stop"] == []


def test_the_engines_eos_ids_are_the_only_eos_and_join_the_extra_stop_ids():
    params = kwargs(eos=(259, 7), stop_token_ids=(7, 42))
    assert params["stop_token_ids"] == [259, 7, 42]
    assert params["ignore_eos"] is True  # vLLM must not add eos ids of its own


def test_only_the_sampled_tokens_logprob_is_requested():
    assert kwargs()["logprobs"] == 0


# ---- finish reasons and to_generation --------------------------------------------------------

@pytest.mark.parametrize(("reason", "hit_context", "expected"), [
    ("stop", False, FinishReason.STOP),
    ("stop", True, FinishReason.STOP),
    ("length", False, FinishReason.LENGTH),
    ("length", True, FinishReason.CONTEXT),
])
def test_finish_reasons_map_to_ours(reason, hit_context, expected):
    assert finish_reason(reason, hit_context=hit_context) is expected


def test_a_stop_token_at_the_length_cap_is_a_stop():
    assert finish_reason("length", hit_context=True, last_token=EOS,
                         stop_token_ids=[EOS]) is FinishReason.STOP
    assert finish_reason("length", hit_context=False, last_token=5,
                         stop_token_ids=[EOS]) is FinishReason.LENGTH


@pytest.mark.parametrize("reason", ["abort", None, "repetition"])
def test_other_finish_reasons_are_errors(reason):
    with pytest.raises(VllmGenerationError, match="finish_reason"):
        finish_reason(reason, hit_context=False)


def test_to_generation_takes_the_sampled_tokens_logprob_from_each_position():
    # the sampled token is looked up, wherever it sits among the top-k entries
    entries = [{3: Logprob(-0.1, rank=1), 7: Logprob(-0.25, rank=2)},
               {9: Logprob(-0.2, rank=1), 11: Logprob(-0.3, rank=2), 3: Logprob(-1.5, rank=4)}]
    generation = to_generation([7, 3], entries, "length", hit_context=False)
    assert generation.token_ids == (7, 3)
    assert generation.logprobs == (-0.25, -1.5)
    assert generation.finish_reason is FinishReason.LENGTH


def test_to_generation_maps_a_context_cut_and_keeps_the_stop_token():
    cut = to_generation([1], [{1: Logprob(-0.5)}], "length", hit_context=True)
    assert cut.finish_reason is FinishReason.CONTEXT
    stopped = to_generation([1, EOS], [{1: Logprob(-0.5)}, {EOS: Logprob(-0.1)}], "stop",
                            hit_context=True, stop_token_ids=[EOS])
    assert stopped.token_ids == (1, EOS) and stopped.finish_reason is FinishReason.STOP


def test_to_generation_of_nothing_is_an_empty_generation():
    empty = to_generation((), None, "length", hit_context=True)
    assert (empty.token_ids, empty.logprobs, empty.finish_reason) == ((), (), FinishReason.CONTEXT)


def test_to_generation_rejects_missing_logprobs():
    with pytest.raises(VllmGenerationError, match="logprob entries"):
        to_generation([1, 2], None, "length", hit_context=False)
    with pytest.raises(VllmGenerationError, match="sampled token 2"):
        to_generation([1, 2], [{1: Logprob(-1.0)}, {5: Logprob(-1.0)}], "length",
                      hit_context=False)


# ---- engine options and versions -------------------------------------------------------------

def test_llm_kwargs_ask_for_processed_logprobs_and_our_context_window():
    options = llm_kwargs("/models/m", max_context_length=512, enable_lora=False, max_lora_rank=8)
    assert options["logprobs_mode"] == LOGPROBS_MODE == "processed_logprobs"
    assert options["max_model_len"] == 512 and options["model"] == "/models/m"
    assert options["generation_config"] == "vllm"
    assert "enable_lora" not in options
    lora = llm_kwargs("/m", max_context_length=512, enable_lora=True, max_lora_rank=8,
                      extra={"dtype": "float32", "max_lora_rank": 32})
    assert (lora["enable_lora"], lora["max_lora_rank"], lora["dtype"]) == (True, 32, "float32")


@pytest.mark.parametrize(("version", "usable"), [
    ("0.9.2", False), ("0.10.0", False), ("0.10.1.1", False), ("0.10.2", True),
    ("0.10.2rc1", True), ("0.11.0+cu128", True), ("1.2.3", True), ("not-a-version", True)])
def test_check_version_rejects_vllm_without_final_processed_logprobs(version, usable):
    if usable:
        check_version(version)
    else:
        with pytest.raises(VllmUnavailableError, match=r"vllm>=0\.10\.2"):
            check_version(version)


def test_without_vllm_the_engine_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    assert vllm_engine.available() is False
    with pytest.raises(VllmUnavailableError) as error:
        VllmEngine(tmp_path)
    assert INSTALL_HINT in str(error.value)
    assert "opentinker-rollout[vllm]" in str(error.value) and "GPU" in str(error.value)


# ---- the engine over a fake vllm module ------------------------------------------------------

@dataclass
class FakeLLM:
    """Answers each request with up to 3 tokens (10, 11, EOS) and records what it was given."""

    options: dict[str, Any]
    calls: list[dict[str, Any]] = field(default_factory=list)

    def generate(self, prompts, sampling_params, *, use_tqdm, lora_request):
        self.calls.append({"prompts": prompts, "params": sampling_params,
                           "lora_request": lora_request, "use_tqdm": use_tqdm})
        return [self._answer(p) for p in sampling_params]

    @staticmethod
    def _answer(params):
        tokens = [10, 11, EOS][:params.kwargs["max_tokens"]]
        entries = [{99: Logprob(-9.0), t: Logprob(-0.5 - i)} for i, t in enumerate(tokens)]
        reason = "stop" if tokens[-1] == EOS else "length"
        completion = types.SimpleNamespace(token_ids=tokens, logprobs=entries,
                                           finish_reason=reason)
        return types.SimpleNamespace(outputs=[completion])


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.__version__ = "0.11.0"
    module.LLM = lambda **options: FakeLLM(options)
    module.SamplingParams = lambda **params: types.SimpleNamespace(kwargs=params)
    lora = types.ModuleType("vllm.lora.request")
    lora.LoRARequest = lambda name, int_id, path: (name, int_id, path)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.lora", types.ModuleType("vllm.lora"))
    monkeypatch.setitem(sys.modules, "vllm.lora.request", lora)
    return module


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_builtin_as_local("tiny-llama", 0, tmp_path_factory.mktemp("tiny-llama"))


def test_engine_reads_context_and_eos_from_the_model_directory(fake_vllm, model_dir):
    engine = VllmEngine(model_dir)
    assert engine.max_context_length == 512 and engine.eos_token_ids == (EOS,)
    assert engine.llm.options["max_model_len"] == 512
    assert engine.llm.options["logprobs_mode"] == "processed_logprobs"
    assert engine.decode([104, 105, EOS]) == "hi<|im_end|>"
    assert vllm_engine.available() is True


def test_engine_sends_one_request_per_sample_and_answers_in_order(fake_vllm, model_dir):
    engine = VllmEngine(model_dir, max_context_length=20)
    requests = [GenerationRequest(prompt_ids=(1, 2, 3), sampling=SamplingConfig(
                    max_new_tokens=8, temperature=1.0, n=2, seed=5)),
                GenerationRequest(prompt_ids=tuple(range(1, 19)), sampling=SamplingConfig(
                    max_new_tokens=8, temperature=0.0)),       # room 2: cut by the window
                GenerationRequest(prompt_ids=tuple(range(1, 21)), sampling=SamplingConfig(
                    max_new_tokens=8))]                        # room 0: never sent
    results = engine.generate(requests)
    (call,) = engine.llm.calls
    assert [p["prompt_token_ids"] for p in call["prompts"]] == [[1, 2, 3], [1, 2, 3],
                                                                list(range(1, 19))]
    assert [p.kwargs["seed"] for p in call["params"]] == [derive_seed(5, 0), derive_seed(5, 1),
                                                          None]
    assert [p.kwargs["max_tokens"] for p in call["params"]] == [8, 8, 2]
    assert call["params"][0].kwargs["stop_token_ids"] == [EOS]
    assert call["lora_request"] == [None, None, None] and call["use_tqdm"] is False
    assert [len(group) for group in results] == [2, 1, 1]
    first = results[0][0]
    assert first.token_ids == (10, 11, EOS) and first.logprobs == (-0.5, -1.5, -2.5)
    assert first.finish_reason is FinishReason.STOP
    assert results[1][0].token_ids == (10, 11)
    assert results[1][0].finish_reason is FinishReason.CONTEXT
    assert results[2][0].token_ids == () and results[2][0].finish_reason is FinishReason.CONTEXT


def test_engine_without_live_samples_does_not_call_vllm(fake_vllm, model_dir):
    engine = VllmEngine(model_dir)
    request = GenerationRequest(prompt_ids=(1,), sampling=SamplingConfig(max_new_tokens=0))
    assert engine.generate([request])[0][0].finish_reason is FinishReason.LENGTH
    assert engine.llm.calls == []


def test_engine_rejects_an_empty_prompt(fake_vllm, model_dir):
    with pytest.raises(ValueError, match="non-empty prompt"):
        VllmEngine(model_dir).generate([GenerationRequest(prompt_ids=(),
                                                          sampling=SamplingConfig())])


def test_each_adapter_load_gets_a_fresh_lora_id(fake_vllm, model_dir, tmp_path):
    engine = VllmEngine(model_dir, adapter_dir=tmp_path / "v1", max_lora_rank=8)
    assert engine.llm.options["enable_lora"] is True
    assert engine.llm.options["max_lora_rank"] == 8
    request = GenerationRequest(prompt_ids=(1,), sampling=SamplingConfig(n=2))
    engine.generate([request])
    engine.load_adapter("", tmp_path / "v1")  # new weights in the same directory
    engine.generate([request])
    first, second = (call["lora_request"] for call in engine.llm.calls)
    assert [lora[1] for lora in first] == [1, 1] and [lora[1] for lora in second] == [2, 2]
    assert first[0][2] == str(tmp_path / "v1")
    engine.unload_adapter("")
    engine.generate([request])
    assert engine.llm.calls[-1]["lora_request"] == [None, None]


@pytest.mark.skipif("adapter" not in getattr(GenerationRequest, "__dataclass_fields__", {}),
                    reason="GenerationRequest has no per-request adapter here")
def test_requests_naming_different_adapters_share_one_vllm_call(fake_vllm, model_dir, tmp_path):
    engine = VllmEngine(model_dir, enable_lora=True)
    engine.load_adapter("job-a", tmp_path / "a")
    engine.load_adapter("job-b", tmp_path / "b")
    requests = [GenerationRequest(prompt_ids=(1,), sampling=SamplingConfig(), adapter=name)
                for name in ("job-a", "", "job-b")]
    engine.generate(requests)
    (call,) = engine.llm.calls
    assert [lora and lora[2] for lora in call["lora_request"]] == [
        str(tmp_path / "a"), None, str(tmp_path / "b")]
    with pytest.raises(ValueError, match="no LoRA adapter named 'job-c'"):
        engine.generate([GenerationRequest(prompt_ids=(1,), sampling=SamplingConfig(),
                                           adapter="job-c")])


def test_an_adapter_needs_lora_enabled(fake_vllm, model_dir, tmp_path):
    with pytest.raises(ValueError, match="enable_lora"):
        VllmEngine(model_dir).load_adapter("job", tmp_path)


# ---- end to end (needs vllm and a GPU; skipped elsewhere) ------------------------------------

@pytest.fixture(scope="module")
def real_engine(model_dir):
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    return VllmEngine(model_dir, llm_options={"dtype": "float32", "enforce_eager": True,
                                              "gpu_memory_utilization": 0.2, "seed": 0})


def chat_prompts() -> list[tuple[int, ...]]:
    from opentinker_runtime.ml.chat import render_prompt
    tokenizer = tiny_model().tokenizer
    return [tuple(render_prompt(tokenizer, [{"role": "user", "content": q}]))
            for q in ("1+1?", "Name a colour.", "Add 123 and 456, then halve it.")]


def test_vllm_greedy_matches_the_transformers_engine(real_engine):
    greedy = SamplingConfig(max_new_tokens=16, temperature=0.0)
    requests = [GenerationRequest(prompt_ids=p, sampling=greedy) for p in chat_prompts()]
    expected = tiny_engine().generate(requests)
    for (ours,), (theirs,) in zip(real_engine.generate(requests), expected, strict=True):
        assert ours.token_ids == theirs.token_ids
        assert ours.finish_reason is theirs.finish_reason
        assert max(abs(a - b) for a, b in zip(ours.logprobs, theirs.logprobs, strict=True)) < 1e-3


def test_vllm_sampled_logprobs_are_those_of_the_processed_distribution(real_engine):
    settings = {"temperature": 0.7, "top_k": 20, "top_p": 0.9}
    config = SamplingConfig(max_new_tokens=16, seed=3, n=2, **settings)
    for prompt in chat_prompts():
        for generation in real_engine.generate([GenerationRequest(prompt_ids=prompt,
                                                                  sampling=config)])[0]:
            tokens = list(generation.token_ids)
            logprobs_T_V = full_forward_logprobs(tiny_model().model, [*prompt, *tokens])
            rows = logprobs_T_V[len(prompt) - 1: len(prompt) - 1 + len(tokens)]
            params = row_params([0.7] * len(tokens), [20] * len(tokens), [0.9] * len(tokens))
            expected = processed_logprobs(rows, params).gather(
                -1, torch.tensor(tokens)[:, None]).squeeze(-1).tolist()
            assert max(abs(a - b) for a, b in zip(expected, generation.logprobs,
                                                  strict=True)) < 1e-3
