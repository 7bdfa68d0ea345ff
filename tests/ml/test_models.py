"""Model loading: builtin determinism, local HF directories (loadable with no OpenTinker code),
checkpoints, LoRA, precision and the reported ModelInfo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from opentinker_runtime.ml import checkpoints
from opentinker_runtime.ml.checkpoints import CheckpointFormat, CheckpointManifest
from opentinker_runtime.ml.errors import ModelSourceError
from opentinker_runtime.ml.models import (BUILTIN_MODELS, LoraSpec, ModelSource, apply_lora, build_builtin,
                                  load_model, save_builtin_as_local, save_model_dir)

TOKENS = torch.tensor([[258, *b"user\n2+2?", 259, 10, 258, *b"assistant\n4", 259]])


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=TOKENS).logits


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_builtin_same_seed_same_weights_other_seed_other_weights(name: str) -> None:
    rng_before = torch.get_rng_state()
    assert same_weights(build_builtin(name, 7), build_builtin(name, 7))
    assert not same_weights(build_builtin(name, 7), build_builtin(name, 8))
    assert torch.equal(torch.get_rng_state(), rng_before), "the global RNG must be left alone"


def test_tiny_llama_info() -> None:
    info = load_model(ModelSource.builtin("tiny-llama", 0)).info
    assert info.architecture == "LlamaForCausalLM"
    assert info.vocab_size == 260 and info.max_context_length == 512
    assert info.stop_token_ids == (259,)
    assert 500_000 < info.parameter_count < 2_000_000
    assert info.trainable_parameter_count == info.parameter_count


def test_unknown_builtin_names_the_field_and_the_choices() -> None:
    with pytest.raises(ModelSourceError, match="name: unknown builtin model 'gpt-9'.*tiny-llama"):
        load_model(ModelSource.builtin("gpt-9", 0))


def test_source_fields_are_checked() -> None:
    with pytest.raises(ModelSourceError, match="^path:"):
        ModelSource(kind="local")
    with pytest.raises(ModelSourceError, match="^kind:"):
        ModelSource(kind="hub", name="x")
    with pytest.raises(ModelSourceError, match="^precision:"):
        ModelSource.builtin("tiny-llama", precision="int4")


def test_saved_builtin_loads_with_plain_transformers(tmp_path) -> None:
    save_builtin_as_local("tiny-qwen2", 3, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    plain = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert same_weights(plain, build_builtin("tiny-qwen2", 3))
    messages = [{"role": "user", "content": "hi"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    loaded = load_model(ModelSource.local(str(tmp_path)))
    assert torch.allclose(logits(loaded.model), logits(plain))


def test_missing_local_directory_names_the_field(tmp_path) -> None:
    with pytest.raises(ModelSourceError, match="^path: .* is not a model directory"):
        load_model(ModelSource.local(str(tmp_path / "nope")))
    save_builtin_as_local("tiny-qwen2", 0, tmp_path / "m")
    with pytest.raises(ModelSourceError, match="^tokenizer_path:"):
        load_model(ModelSource.local(str(tmp_path / "m"), tokenizer_path=str(tmp_path / "t")))


def test_precision_sets_the_dtype() -> None:
    loaded = load_model(ModelSource.builtin("tiny-qwen2", 0, precision="bfloat16"))
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}


def test_lora_targets_every_linear_layer_and_starts_as_the_base() -> None:
    base = build_builtin("tiny-qwen2", 0)
    before = logits(base)
    model = apply_lora(base, LoraSpec(rank=4, alpha=8))
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    adapted = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trainable}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert torch.allclose(logits(model), before)  # lora_B starts at zero


def test_lora_with_unknown_target_module_names_the_field() -> None:
    with pytest.raises(ModelSourceError, match="^target_modules:"):
        apply_lora(build_builtin("tiny-qwen2", 0), LoraSpec(rank=2, target_modules=("nope_proj",)))


def write_checkpoint(root, checkpoint_id, model, tokenizer, fmt, base, lora=None) -> None:
    with checkpoints.writing_checkpoint(root, checkpoint_id) as staging:
        if fmt == CheckpointFormat.HF_MODEL:
            save_model_dir(model, tokenizer, staging / checkpoints.MODEL_DIR)
        else:
            model.save_pretrained(staging / checkpoints.ADAPTER_DIR)
        checkpoints.write_manifest(staging, CheckpointManifest(
            checkpoint_id=checkpoint_id, format=fmt, base=base, lora=lora))


def test_checkpoint_sources_load_full_and_adapter_checkpoints(tmp_path) -> None:
    base = ModelSource.builtin("tiny-qwen2", 5)
    loaded = load_model(base)
    model = apply_lora(loaded.model, LoraSpec(rank=4))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.1)
    expected = logits(model)
    write_checkpoint(tmp_path, "adapter-1", model, loaded.tokenizer, CheckpointFormat.PEFT_ADAPTER,
                     base, LoraSpec(rank=4))
    write_checkpoint(tmp_path, "full-1", model, loaded.tokenizer, CheckpointFormat.HF_MODEL, base)
    for checkpoint_id in ("adapter-1", "full-1"):
        restored = load_model(ModelSource.checkpoint(checkpoint_id), tmp_path)
        assert torch.allclose(logits(restored.model), expected, atol=1e-5), checkpoint_id
        assert restored.info.architecture == "Qwen2ForCausalLM"


def test_the_protos_name_every_builtin_model() -> None:
    """The job spec's reference (docs/job_spec.md, from the protos) lists what a worker builds."""
    proto = (Path(__file__).resolve().parents[2] / "protos/opentinker/common/v1/model.proto").read_text()
    comment = proto.split("message BuiltinModel {", 1)[1].split("string name", 1)[0]
    assert sorted(re.findall(r'"([a-z0-9-]+)"', comment)) == sorted(BUILTIN_MODELS)
