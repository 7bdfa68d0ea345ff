"""Clock cycles: several LoRA sessions' ForwardBackward calls on one shared base run as one
batched, routed forward/backward (`cycles.run_cycle`), and each session gets what it would alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from opentinker_runtime.ml.sources import LoraSpec
from opentinker_trainer import cycle_pass, cycles
from opentinker_trainer.batching import Datum
from opentinker_trainer.config import LossConfig, LossFunction
from opentinker_trainer.errors import ValidationError
from opentinker_trainer.session import TrainingSession
from opentinker_trainer.session_factory import create_session
from opentinker_trainer.shared_base import SharedBases
from tests.trainer.helpers import CE, PPO, rl_datums, rows_close, same, sft_datums, spec

MODEL = "tiny-llama"
LORAS = [LoraSpec(rank=4, alpha=8.0), LoraSpec(rank=2, alpha=2.0, target_modules=("q_proj", "v_proj")),
         LoraSpec(rank=8, alpha=16.0, target_modules=("gate_proj", "down_proj", "o_proj"))]
GRPO = LossConfig(function=LossFunction.POLICY_GRADIENT)


def make(bases: SharedBases | None, lora: LoraSpec, seed: int, max_tokens: int = 0) -> TrainingSession:
    return create_session(f"s{seed}", spec(lora=lora, seed=seed, model=MODEL, max_tokens=max_tokens),
                          checkpoint_root=Path("."), bases=bases)


def batches(seed: int) -> tuple[list[Datum], LossConfig]:
    """A different batch and loss per session: PPO, cross-entropy, policy gradient."""
    kind = seed % 3
    if kind == 0:
        return rl_datums(count=4, length=14, seed=seed), PPO
    if kind == 1:
        return sft_datums(), CE
    return rl_datums(count=3, length=9, seed=seed), GRPO


def grads(session: TrainingSession) -> list[torch.Tensor]:
    return [p.grad.clone() for p in session.trainable_parameters()]


def adapter(session: TrainingSession) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in session.model.named_parameters() if p.requires_grad}


def close(a: list[torch.Tensor], b: list[torch.Tensor], atol: float = 1e-5) -> bool:
    return len(a) == len(b) and all(torch.allclose(x, y, atol=atol, rtol=1e-4) for x, y in zip(a, b))


@pytest.mark.parametrize("max_tokens", [0, 48])
def test_a_joint_cycle_gives_each_session_what_it_computes_alone(max_tokens: int) -> None:
    bases = SharedBases()
    shared = [make(bases, lora, seed, max_tokens) for seed, lora in enumerate(LORAS)]
    alone = [make(None, lora, seed, max_tokens) for seed, lora in enumerate(LORAS)]
    for step in range(2):
        calls = [cycles.CycleCall(session=s, datums=batches(i + 3 * step)[0], loss=batches(i + 3 * step)[1])
                 for i, s in enumerate(shared)]
        outcomes = cycles.run_cycle(calls)
        for i, (outcome, twin) in enumerate(zip(outcomes, alone)):
            datums, loss = batches(i + 3 * step)
            expected = twin.forward_backward(datums, loss)
            assert outcome.cycle["cycle/sessions"] == 3.0
            assert outcome.loss == pytest.approx(expected.loss, abs=1e-5)
            assert rows_close(outcome.logprobs, expected.logprobs, atol=1e-5)
            assert outcome.num_tokens == expected.num_tokens
            assert outcome.metrics.keys() == expected.metrics.keys()
            assert all(outcome.metrics[k] == pytest.approx(expected.metrics[k], abs=1e-4) for k in expected.metrics)
            assert close(grads(shared[i]), grads(twin))
        for s, twin in zip(shared, alone):
            s.optim_step()
            twin.optim_step()
    for s, twin in zip(shared, alone):  # AdamW moves an element by up to lr (1e-2) a step, whatever
        # its gradient's size: gradients equal up to float rounding may part by a fraction of that
        assert close(list(adapter(s).values()), list(adapter(twin).values()), atol=1e-3)


def _observed(histogram) -> float:
    return next(sample.value for metric in histogram.collect() for sample in metric.samples
                if sample.name.endswith("_count"))


def test_a_joint_cycle_counts_one_forward_backward_per_call_and_one_joint_cycle() -> None:
    from opentinker_trainer.metrics import CYCLE_SESSIONS, FORWARD_BACKWARD_SECONDS

    bases = SharedBases()
    sessions = [make(bases, LORAS[0], i) for i in range(3)]
    calls_before, cycles_before = _observed(FORWARD_BACKWARD_SECONDS), _observed(CYCLE_SESSIONS)
    cycles.run_cycle([cycles.CycleCall(session=s, datums=rl_datums(seed=i), loss=PPO) for i, s in enumerate(sessions)])
    assert _observed(FORWARD_BACKWARD_SECONDS) - calls_before == 3
    assert _observed(CYCLE_SESSIONS) - cycles_before == 1


def test_a_session_outside_the_cycle_keeps_its_adapter_bit_for_bit() -> None:
    bases = SharedBases()
    first, second, idle = (make(bases, LORAS[0], 0), make(bases, LORAS[1], 1), make(bases, LORAS[2], 2))
    before = adapter(idle)
    outcomes = cycles.run_cycle([cycles.CycleCall(session=s, datums=rl_datums(seed=i), loss=PPO)
                                 for i, s in enumerate((first, second))])
    assert all(o.cycle["cycle/sessions"] == 2.0 for o in outcomes)
    first.optim_step()
    second.optim_step()
    assert same(before, adapter(idle))
    assert all(p.grad is None for p in idle.trainable_parameters())


def test_a_call_with_bad_datums_fails_alone_and_the_others_succeed() -> None:
    bases = SharedBases()
    sessions = [make(bases, LORAS[0], 0), make(bases, LORAS[0], 1), make(bases, LORAS[0], 2)]
    bad = [Datum(tokens=(1, 2, 3), loss_mask=(0.0, 1.0))]  # one mask value short
    outcomes = cycles.run_cycle([cycles.CycleCall(session=sessions[0], datums=rl_datums(), loss=PPO),
                                 cycles.CycleCall(session=sessions[1], datums=bad, loss=PPO),
                                 cycles.CycleCall(session=sessions[2], datums=rl_datums(seed=2), loss=PPO)])
    assert isinstance(outcomes[1], ValidationError) and outcomes[1].field == "datums[0].loss_mask"
    assert outcomes[0].cycle["cycle/sessions"] == 2.0 and outcomes[2].cycle["cycle/sessions"] == 2.0
    assert sessions[1].pending_datums == 0


def test_a_failing_joint_pass_takes_its_gradients_back_and_runs_each_call_alone(monkeypatch) -> None:
    bases = SharedBases()
    shared = [make(bases, LORAS[0], 0), make(bases, LORAS[1], 1)]
    alone = [make(None, LORAS[0], 0), make(None, LORAS[1], 1)]
    for s, twin in zip(shared, alone):  # gradients pending from an earlier call must survive
        s.forward_backward(rl_datums(seed=9), PPO)
        twin.forward_backward(rl_datums(seed=9), PPO)
    real = cycle_pass.batch_objective
    calls_made = []

    def fail_on_the_second_call(*args, **kwargs):
        calls_made.append(1)
        if len(calls_made) == 2:
            raise RuntimeError("out of memory (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(cycle_pass, "batch_objective", fail_on_the_second_call)
    outcomes = cycles.run_cycle([cycles.CycleCall(session=s, datums=rl_datums(seed=i), loss=PPO)
                                 for i, s in enumerate(shared)])
    for i, (outcome, s, twin) in enumerate(zip(outcomes, shared, alone)):
        expected = twin.forward_backward(rl_datums(seed=i), PPO)
        assert outcome.cycle["cycle/sessions"] == 1.0
        assert outcome.loss == pytest.approx(expected.loss, abs=1e-6)
        assert close(grads(s), grads(twin), atol=1e-6)


def test_calls_that_cannot_join_run_alone() -> None:
    bases = SharedBases()
    dropout = make(bases, LoraSpec(rank=4, alpha=8.0, dropout=0.1), 0)
    masked = make(bases, LORAS[0], 1)
    plain = make(bases, LORAS[0], 2)
    private = make(None, LORAS[0], 3)
    masking = LossConfig(function=LossFunction.PPO_CLIP, clip_low=0.2, clip_high=0.28, importance_mask="token")
    assert not cycles.joinable(dropout, PPO, rl_datums())
    assert not cycles.joinable(masked, masking, rl_datums())
    assert not cycles.joinable(private, PPO, rl_datums())
    assert cycles.joinable(plain, PPO, rl_datums())
    outcomes = cycles.run_cycle([cycles.CycleCall(session=dropout, datums=rl_datums(), loss=PPO),
                                 cycles.CycleCall(session=masked, datums=rl_datums(), loss=masking),
                                 cycles.CycleCall(session=plain, datums=rl_datums(), loss=PPO)])
    assert [o.cycle["cycle/sessions"] for o in outcomes] == [1.0, 1.0, 1.0]


def test_micro_batches_keep_each_calls_rows_together_within_the_budget() -> None:
    lengths = [10, 30, 20, 5, 40, 25, 8]
    owners = [0, 0, 1, 1, 2, 2, 2]
    plan = cycles.plan_by_call(lengths, owners, max_tokens=60)
    assert sorted(i for micro in plan for i in micro) == list(range(7))
    flat = [i for micro in plan for i in micro]
    assert [owners[i] for i in flat] == sorted(owners[i] for i in flat)  # calls in order, each in one run
    for micro in plan:
        assert len(micro) * max(lengths[i] for i in micro) <= 60 or len(micro) == 1
    assert cycles.plan_by_call(lengths, owners, max_tokens=0) == [flat]
    assert cycles.plan_by_call([100, 3], [0, 1], max_tokens=50) == [[0], [1]]  # too long: alone


def test_a_call_that_fits_in_a_micro_batch_is_never_cut_in_two() -> None:
    # three calls of 16 rows of 56 tokens (896 padded) under a 1024 budget: one each, where
    # filling row by row put 2 rows of the next call in each (two runs of adapters, twice)
    lengths, owners = [56] * 48, [c for c in range(3) for _ in range(16)]
    assert cycles.plan_by_call(lengths, owners, max_tokens=1024) == [list(range(16 * c, 16 * c + 16)) for c in range(3)]
    # small calls still share one; a call longer than the budget fills its own, then others join
    plan = cycles.plan_by_call([10] * 3 + [10] * 8 + [10] * 2, [0] * 3 + [1] * 8 + [2] * 2, max_tokens=50)
    assert plan == [[0, 1, 2], [3, 4, 5, 6, 7], [8, 9, 10, 11, 12]]


def grpo_groups(seed: int, prompts: int = 2, group: int = 4) -> list[Datum]:
    """`prompts` prompts of 20 tokens, `group` completions of 6-9 tokens each (trained)."""
    g = torch.Generator().manual_seed(seed)
    datums = []
    for p in range(prompts):
        prompt = torch.randint(0, 256, (20,), generator=g).tolist()
        for i in range(group):
            completion = torch.randint(0, 256, (6 + i % 4,), generator=g).tolist()
            n = len(prompt) + len(completion)
            datums.append(Datum(tokens=tuple(prompt + completion), loss_mask=(0.0,) * len(prompt) + (1.0,) * len(completion),
                                advantages=(1.0 if i % 2 else -1.0,) * n, sampling_logprobs=(-5.5,) * n))
    return datums


def test_calls_with_shared_prompts_run_their_prefixes_once_and_equal_alone() -> None:
    bases = SharedBases()
    shared = [make(bases, lora, seed) for seed, lora in enumerate(LORAS)]
    alone = [make(None, lora, seed) for seed, lora in enumerate(LORAS)]
    outcomes = cycles.run_cycle([cycles.CycleCall(session=s, datums=grpo_groups(i), loss=PPO)
                                 for i, s in enumerate(shared)])
    for i, (outcome, twin) in enumerate(zip(outcomes, alone)):
        expected = twin.forward_backward(grpo_groups(i), PPO)
        assert outcome.cycle["cycle/sessions"] == 3.0
        assert outcome.metrics["prefix_shared_fraction"] == pytest.approx(expected.metrics["prefix_shared_fraction"])
        assert outcome.metrics["prefix_shared_fraction"] > 0.4
        assert outcome.loss == pytest.approx(expected.loss, abs=1e-5)
        assert rows_close(outcome.logprobs, expected.logprobs, atol=1e-4)
        assert close(grads(shared[i]), grads(twin), atol=1e-5)
