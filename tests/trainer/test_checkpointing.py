"""SaveCheckpoint / LoadCheckpoint: exact resume, HF and peft directories, compatibility."""

from __future__ import annotations

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from opentinker_runtime.ml.checkpoints import CheckpointFormat, read_manifest
from opentinker_runtime.ml.models import build_builtin, load_model
from opentinker_runtime.ml.sources import LoraSpec, ModelSource
from opentinker_trainer.checkpointing import load_checkpoint, save_checkpoint
from opentinker_trainer.errors import CheckpointNotFoundError, ValidationError
from tests.trainer.helpers import (CE, MODEL, PPO, policy_logprobs, rl_datums, same, session,
                                   sft_datums, weights)

LORA = LoraSpec(rank=4, alpha=8, dropout=0.1)  # dropout exercises the saved RNG state


def train(s, steps: int) -> list[float]:
    losses = []
    for index in range(steps):
        losses.append(s.forward_backward(rl_datums(seed=index), PPO).loss)
        s.optim_step()
    return losses


@pytest.mark.parametrize("lora", [LORA, None], ids=["lora", "full"])
def test_training_state_resumes_exactly(tmp_path, lora) -> None:
    s = session(tmp_path, lora=lora, job_id="job-7")
    train(s, 2)
    record = save_checkpoint(s, tmp_path, format=CheckpointFormat.TRAINING_STATE, data_cursor=b"c7")
    assert record.checkpoint_id == "job-7-step-2" and record.step == 2 and record.size_bytes > 0
    assert (record.path / "training_state.pt").is_file()
    first_losses, first_weights = train(s, 2), weights(s)
    version_before = s.policy_version
    assert load_checkpoint(s, tmp_path, record.checkpoint_id) == b"c7"
    assert s.step == 2 and s.policy_version == version_before + 1 and s.pending_datums == 0
    assert train(s, 2) == first_losses
    assert same(weights(s), first_weights)


def test_training_state_loads_into_a_fresh_session(tmp_path) -> None:
    s = session(tmp_path, lora=LORA)
    train(s, 1)
    record = save_checkpoint(s, tmp_path, format=CheckpointFormat.TRAINING_STATE, name="warm")
    assert record.checkpoint_id == "sess-test-warm"
    fresh = session(tmp_path, lora=LORA)
    load_checkpoint(fresh, tmp_path, record.checkpoint_id)
    assert same(weights(fresh), weights(s)) and fresh.step == 1
    assert train(fresh, 1) == train(s, 1)


def test_hf_model_checkpoint_of_a_lora_session_is_the_merged_policy(tmp_path) -> None:
    s = session(tmp_path, lora=LORA, lr=5e-2)
    train(s, 2)
    expected = policy_logprobs(s.model)
    record = save_checkpoint(s, tmp_path, format=CheckpointFormat.HF_MODEL)
    plain = AutoModelForCausalLM.from_pretrained(record.path / "model", local_files_only=True)
    assert torch.allclose(policy_logprobs(plain), expected, atol=1e-5)
    as_base = load_model(ModelSource.checkpoint(record.checkpoint_id), tmp_path)
    assert torch.allclose(policy_logprobs(as_base.model), expected, atol=1e-5)
    assert read_manifest(tmp_path, record.checkpoint_id).lora == LORA


def test_peft_adapter_checkpoint_loads_with_peft_over_the_base(tmp_path) -> None:
    s = session(tmp_path, lora=LORA, lr=5e-2)
    train(s, 2)
    record = save_checkpoint(s, tmp_path, format=CheckpointFormat.PEFT_ADAPTER, name="adapter")
    adapted = PeftModel.from_pretrained(build_builtin(MODEL, 0), record.path / "adapter")
    assert torch.allclose(policy_logprobs(adapted), policy_logprobs(s.model), atol=1e-5)
    other = session(tmp_path, lora=LORA)
    load_checkpoint(other, tmp_path, record.checkpoint_id)
    assert torch.allclose(policy_logprobs(other.model), policy_logprobs(s.model), atol=1e-6)


def test_full_session_checkpoint_round_trip_and_refusals(tmp_path) -> None:
    s = session(tmp_path)
    s.forward_backward(sft_datums(), CE)
    s.optim_step()
    with pytest.raises(ValidationError, match="PEFT_ADAPTER needs a LoRA session"):
        save_checkpoint(s, tmp_path, format=CheckpointFormat.PEFT_ADAPTER)
    with pytest.raises(ValidationError) as raised:
        save_checkpoint(s, tmp_path, format=CheckpointFormat.HF_MODEL, name="../up")
    assert raised.value.field == "name"
    record = save_checkpoint(s, tmp_path, format=CheckpointFormat.HF_MODEL)
    fresh = session(tmp_path)
    load_checkpoint(fresh, tmp_path, record.checkpoint_id)
    assert same(weights(fresh), weights(s)) and fresh.step == 0
    with pytest.raises(ValidationError, match="adaptations must match"):
        load_checkpoint(fresh, tmp_path, save_checkpoint(session(tmp_path, lora=LORA), tmp_path,
                                                         format=CheckpointFormat.TRAINING_STATE,
                                                         name="lora").checkpoint_id)
    with pytest.raises(CheckpointNotFoundError, match="checkpoint_id: no checkpoint 'nope'"):
        load_checkpoint(fresh, tmp_path, "nope")
