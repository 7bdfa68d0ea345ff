"""Memory by default: the Trainer's own micro-batch budget (from the model's size and the free
memory), exact gradients across the micro-batches it makes, and the peak memory it reports."""

from __future__ import annotations

import pytest
import torch

from opentinker_runtime.ml.sources import LoraSpec
from opentinker_trainer import memory
from opentinker_trainer.config import LossAggregation, LossConfig, LossFunction
from opentinker_trainer.memory import (MAX_DEFAULT_TOKENS, MICRO_BATCH_TOKENS, MIN_DEFAULT_TOKENS,
                                       PEAK_MEMORY, ModelShape, StepMemory,
                                       activation_bytes_per_token, default_micro_batch_tokens)
from opentinker_trainer.batching import plan_micro_batches
from tests.trainer.helpers import rl_datums, rows_close, session

GIB = 1024 ** 3
SMALL = ModelShape(hidden_size=512, intermediate_size=1792, num_layers=8, vocab_size=260)


def test_activations_per_token_grow_with_every_dimension_and_a_big_vocabulary_weighs() -> None:
    base = activation_bytes_per_token(SMALL)
    for bigger in (ModelShape(hidden_size=1024, intermediate_size=1792, num_layers=8, vocab_size=260),
                   ModelShape(hidden_size=512, intermediate_size=4096, num_layers=8, vocab_size=260),
                   ModelShape(hidden_size=512, intermediate_size=1792, num_layers=16, vocab_size=260),
                   ModelShape(hidden_size=512, intermediate_size=1792, num_layers=8, vocab_size=50_000)):
        assert activation_bytes_per_token(bigger) > base
    smol = ModelShape(hidden_size=576, intermediate_size=1536, num_layers=30, vocab_size=49_152)
    head = memory.HEAD_VOCAB_FLOATS * smol.vocab_size * 4
    assert head > activation_bytes_per_token(smol) / 4  # SmolLM2-135M's shape: over a quarter


def test_a_bigger_model_or_less_free_memory_gets_a_smaller_budget_within_the_bounds() -> None:
    small, big = 200_000, 2_000_000
    assert default_micro_batch_tokens(big, 4 * GIB) < default_micro_batch_tokens(small, 4 * GIB)
    assert default_micro_batch_tokens(big, 1 * GIB) < default_micro_batch_tokens(big, 4 * GIB)
    assert default_micro_batch_tokens(big, 4 * GIB, reserved_bytes=2 * GIB) < default_micro_batch_tokens(big, 4 * GIB)
    assert default_micro_batch_tokens(big, 4 * GIB) == int(4 * GIB * memory.ACTIVATION_SHARE // big)
    assert default_micro_batch_tokens(small, 1000 * GIB) == MAX_DEFAULT_TOKENS
    assert default_micro_batch_tokens(big, 0) == MIN_DEFAULT_TOKENS


def test_the_session_picks_the_default_from_free_memory_and_an_explicit_budget_wins(monkeypatch) -> None:
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device: 0)
    assert session().micro_batch_tokens == MIN_DEFAULT_TOKENS
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device: 1000 * GIB)
    assert session().micro_batch_tokens == MAX_DEFAULT_TOKENS
    assert session(max_tokens=28).micro_batch_tokens == 28


def test_free_memory_is_known_on_this_machine() -> None:
    assert memory.free_memory_bytes("cpu") > 0


@pytest.mark.parametrize("aggregation", list(LossAggregation))
def test_the_default_budget_splits_a_large_batch_into_the_same_loss_and_gradients(monkeypatch, aggregation) -> None:
    loss = LossConfig(function=LossFunction.PPO_CLIP, clip_low=0.2, clip_high=0.2,
                      aggregation=aggregation, entropy_coef=0.01)
    datums = rl_datums(count=6, length=70)  # 405 tokens: 2 micro-batches of <= 256
    lora = LoraSpec(rank=4, alpha=8.0)
    whole = session(lora=lora, max_tokens=100_000)
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device: 0)
    split = session(lora=lora)
    assert len(plan_micro_batches([len(d.tokens) for d in datums], split.micro_batch_tokens)) > 1
    result_whole = whole.forward_backward(datums, loss)
    result_split = split.forward_backward(datums, loss)
    assert result_split.loss == pytest.approx(result_whole.loss, rel=1e-5, abs=1e-7)
    assert result_split.metrics == pytest.approx(result_whole.metrics, rel=1e-4, abs=1e-6)
    for (name, a), b in zip(whole.model.named_parameters(), split.model.parameters()):
        assert (a.grad is None) == (b.grad is None), name
        if a.grad is not None:
            assert torch.allclose(a.grad, b.grad, atol=1e-6), name
    assert rows_close(result_split.logprobs, result_whole.logprobs)


def test_forward_backward_and_optim_step_report_peak_memory_and_the_budget() -> None:
    s = session(max_tokens=64)
    first = s.forward_backward(rl_datums(count=4, length=20), LossConfig(function=LossFunction.PPO_CLIP))
    second = s.forward_backward(rl_datums(count=2, length=12), LossConfig(function=LossFunction.PPO_CLIP))
    step = s.optim_step()
    assert first.memory[MICRO_BATCH_TOKENS] == 64
    assert PEAK_MEMORY not in first.metrics  # the loss metrics stay the same from run to run
    peaks = [first.memory[PEAK_MEMORY], second.memory[PEAK_MEMORY], step.memory[PEAK_MEMORY]]
    assert all(peak > 0 for peak in peaks)
    assert step.memory[PEAK_MEMORY] >= max(peaks[:2])  # the step's peak covers its calls


def test_step_memory_keeps_the_highest_call_until_the_step_ends(monkeypatch) -> None:
    readings = iter([100 * memory.MB, 300 * memory.MB, 200 * memory.MB, 50 * memory.MB])
    monkeypatch.setattr(memory, "_peak_rss", lambda: next(readings))
    meter = StepMemory("cpu")
    assert [meter.end_call(), meter.end_call(), meter.end_call()] == [100, 300, 200]
    assert meter.end_step() == 300
    assert meter.end_call() == 50 and meter.end_step() == 50
