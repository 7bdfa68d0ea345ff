"""LoRA sessions of one base model share one frozen copy of it (`shared_base`), and each still
trains exactly as it would on a copy of its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from opentinker_runtime.ml.sources import LoraSpec, ModelSource
from opentinker_trainer.errors import ValidationError
from opentinker_trainer.session import TrainingSession
from opentinker_trainer.session_factory import create_session
from opentinker_trainer.shared_base import SharedBases
from tests.trainer.helpers import PPO, rl_datums, same, spec

LORA = LoraSpec(rank=4, alpha=8.0)


def lora_session(bases: SharedBases | None, *, lora: LoraSpec = LORA, seed: int = 0,
                 model: str = "tiny-llama", name: str = "sess") -> TrainingSession:
    return create_session(name, spec(lora=lora, seed=seed, model=model), checkpoint_root=Path("."),
                          bases=bases)


def base_tensors(session: TrainingSession) -> dict[str, torch.Tensor]:
    """The frozen (base) parameters of a session's model by name, without peft's wrapping."""
    return {name.replace("base_model.model.", "").replace(".base_layer", ""): p
            for name, p in session.model.named_parameters() if not p.requires_grad}


def adapter(session: TrainingSession) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in session.model.named_parameters() if p.requires_grad}


def train(session: TrainingSession, steps: int, seed: int = 0) -> list[float]:
    losses = []
    for step in range(steps):
        losses.append(session.forward_backward(rl_datums(seed=seed + step), PPO).loss)
        session.optim_step()
    return losses


def test_sessions_of_one_base_hold_the_same_tensors_and_adapters_of_their_own() -> None:
    bases = SharedBases()
    first, second = lora_session(bases, name="a"), lora_session(bases, seed=1, name="b")
    assert len(bases.resident()) == 1
    ours, theirs = base_tensors(first), base_tensors(second)
    assert ours.keys() == theirs.keys() and ours
    assert all(ours[name] is theirs[name] for name in ours)
    assert not any(p.requires_grad for p in ours.values())
    first_adapter = {id(p) for p in first.trainable_parameters()}
    assert first_adapter.isdisjoint(id(p) for p in second.trainable_parameters())
    assert first.base_key == second.base_key != ""


def test_a_session_on_a_shared_base_trains_bit_for_bit_like_one_on_its_own_copy() -> None:
    alone = lora_session(None)
    bases = SharedBases()
    shared, neighbour = lora_session(bases), lora_session(bases, seed=7, lora=LoraSpec(rank=2, alpha=2.0))
    expected = train(alone, 3)
    got = []
    for step in range(3):  # the neighbour trains between every call of ours
        got.append(shared.forward_backward(rl_datums(seed=step), PPO).loss)
        train(neighbour, 1, seed=10 + step)
        shared.optim_step()
    assert got == expected
    assert same(adapter(shared), adapter(alone))


def test_training_one_session_leaves_the_base_and_the_other_adapters_untouched() -> None:
    bases = SharedBases()
    first, second = lora_session(bases, name="a"), lora_session(bases, seed=3, name="b")
    base_before = {name: t.detach().clone() for name, t in base_tensors(first).items()}
    second_before = adapter(second)
    first_before = adapter(first)
    train(first, 2)
    assert same(base_before, {name: t.detach().clone() for name, t in base_tensors(second).items()})
    assert same(second_before, adapter(second))
    assert not same(first_before, adapter(first))


def test_ranks_alphas_and_target_modules_may_differ_on_one_base() -> None:
    bases = SharedBases()
    narrow = lora_session(bases, lora=LoraSpec(rank=2, alpha=4.0, target_modules=("q_proj", "v_proj")), name="a")
    wide = lora_session(bases, lora=LoraSpec(rank=16, alpha=8.0), name="b")
    assert len(bases.resident()) == 1
    assert narrow.view().model_info.trainable_parameter_count < wide.view().model_info.trainable_parameter_count
    for session in (narrow, wide):
        losses = train(session, 3)
        assert all(torch.isfinite(torch.tensor(losses)))


def test_the_base_is_freed_when_its_last_session_closes_and_reloaded_for_the_next() -> None:
    loads = []

    def loader(source, root, device):
        from opentinker_runtime.ml.models import load_model
        loads.append(source.name)
        return load_model(source, root, device=device)

    bases = SharedBases(loader)
    first, second = lora_session(bases, name="a"), lora_session(bases, name="b")
    first.close()
    assert len(bases.resident()) == 1 and loads == ["tiny-llama"]
    assert train(second, 1)
    second.close()
    assert bases.resident() == []
    lora_session(bases, name="c")
    assert loads == ["tiny-llama", "tiny-llama"]


def test_other_sources_seeds_and_full_sessions_do_not_share() -> None:
    bases = SharedBases()
    lora_session(bases, name="a")
    lora_session(bases, model="tiny-qwen2", name="b")
    other_seed = dataclasses.replace(spec(lora=LORA, model="tiny-llama"), base=ModelSource.builtin("tiny-llama", 5))
    create_session("c", other_seed, checkpoint_root=Path("."), bases=bases)
    full = create_session("d", spec(model="tiny-llama"), checkpoint_root=Path("."), bases=bases)
    assert len(bases.resident()) == 3
    assert full.base is None and full.base_key == ""


def test_a_session_that_fails_to_build_lets_the_base_go() -> None:
    bases = SharedBases()
    with pytest.raises(ValidationError) as error:
        lora_session(bases, lora=LoraSpec(target_modules=("no_such_module",)))
    assert error.value.field == "adaptation.lora.target_modules"
    assert bases.resident() == []


def test_the_shared_base_is_loaded_once_in_memory() -> None:
    """Eight sessions: the distinct storages of their models add up to one base plus eight
    adapters (a private copy each would be eight bases)."""
    bases = SharedBases()
    sessions = [lora_session(bases, seed=i, name=f"s{i}", model="tiny-llama") for i in range(8)]
    storages: dict[int, int] = {}
    for session in sessions:
        for tensor in [*session.model.parameters(), *session.model.buffers()]:
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    base_bytes = sum(t.untyped_storage().nbytes() for t in base_tensors(sessions[0]).values())
    adapter_bytes = sum(p.untyped_storage().nbytes() for p in sessions[0].trainable_parameters())
    assert sum(storages.values()) <= base_bytes * 1.05 + 8 * adapter_bytes


def test_a_shared_base_sessions_checkpoint_resumes_bit_exactly_alone_or_shared(tmp_path) -> None:
    from opentinker_runtime.ml.checkpoints import CheckpointFormat
    from opentinker_trainer.checkpointing import load_checkpoint, save_checkpoint

    def made(bases: SharedBases | None, name: str) -> TrainingSession:
        return create_session(name, spec(lora=LORA, model="tiny-llama", job_id=name), checkpoint_root=tmp_path,
                              bases=bases)

    bases = SharedBases()
    writer = made(bases, "writer")
    lora_session(bases, seed=4, name="neighbour")
    train(writer, 2)
    record = save_checkpoint(writer, tmp_path, format=CheckpointFormat.TRAINING_STATE, name="two")
    expected = train(writer, 2, seed=2)
    for resumed in (made(None, "private"), made(bases, "shared")):
        load_checkpoint(resumed, tmp_path, record.checkpoint_id)
        assert resumed.step == 2
        assert train(resumed, 2, seed=2) == expected
        assert same(adapter(resumed), adapter(writer))


def test_a_closed_session_kept_somewhere_holds_no_weights_of_the_base() -> None:
    import gc
    import weakref

    bases = SharedBases()
    session = lora_session(bases)
    base_model = weakref.ref(bases.resident()[0].loaded.model)
    session.close()
    gc.collect()
    assert session.base is not None and session.base.key  # the closed session still says what it stood on
    assert base_model() is None
