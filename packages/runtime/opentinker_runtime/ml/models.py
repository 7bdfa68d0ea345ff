"""Loading policies: builtin tiny models (deterministic by seed), local HF directories and
checkpoints written by the Trainer; LoRA adapters via peft.

Nothing is ever fetched from a model hub: local directories load with local_files_only=True.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM,
                          PreTrainedModel, PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM)
from transformers.utils import logging as transformers_logging

from opentinker_runtime.ml import checkpoints
from opentinker_runtime.ml.errors import ModelSourceError
from opentinker_runtime.ml.sources import LoraSpec, ModelInfo, ModelKind, ModelSource, Precision
from opentinker_runtime.ml.tokenizer import VOCAB_SIZE, build_byte_tokenizer
from opentinker_runtime.ml.tokenizers import load_directory_tokenizer, not_a_model_directory

__all__ = ["BUILTIN_MODELS", "BuiltinModel", "LoadedModel", "LoraSpec", "ModelInfo",
           "ModelSource", "add_lora_adapter", "apply_lora", "build_builtin", "describe_model", "load_model",
           "merged_copy", "quiet_transformers", "save_builtin_as_local", "save_model_dir",
           "torch_dtype"]

ALL_LINEAR = "all-linear"
DTYPES = {Precision.DEFAULT: torch.float32, Precision.FLOAT32: torch.float32,
          Precision.BFLOAT16: torch.bfloat16, Precision.FLOAT16: torch.float16}


@dataclass(frozen=True, kw_only=True)
class BuiltinModel:
    """A small architecture built from a config, with the byte-level tokenizer."""

    config_cls: type
    model_cls: type
    sizes: dict[str, Any]

    def config(self) -> Any:
        tokenizer_ids = {"vocab_size": VOCAB_SIZE, "pad_token_id": 256, "bos_token_id": 257,
                         "eos_token_id": 259, "tie_word_embeddings": True}
        return self.config_cls(**tokenizer_ids, **self.sizes)


_TINY = {"max_position_embeddings": 512, "num_attention_heads": 4}
BUILTIN_MODELS: dict[str, BuiltinModel] = {
    # ~0.9M parameters: one 16 x 64-token ForwardBackward + OptimStep takes tens of ms on CPU.
    "tiny-llama": BuiltinModel(config_cls=LlamaConfig, model_cls=LlamaForCausalLM, sizes={
        **_TINY, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4,
        "num_key_value_heads": 4}),
    # ~0.15M parameters, grouped-query attention with biases: the fastest model for tests.
    "tiny-qwen2": BuiltinModel(config_cls=Qwen2Config, model_cls=Qwen2ForCausalLM, sizes={
        **_TINY, "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_key_value_heads": 2}),
    # ~30M parameters (hidden 512, 8 layers): big enough that a step's memory and time are
    # those of a real model's, in proportion (bench/trainer.py's memory section).
    "small-llama": BuiltinModel(config_cls=LlamaConfig, model_cls=LlamaForCausalLM, sizes={
        "max_position_embeddings": 1024, "num_attention_heads": 8, "hidden_size": 512,
        "intermediate_size": 1792, "num_hidden_layers": 8, "num_key_value_heads": 8}),
}


@dataclass(frozen=True, kw_only=True)
class LoadedModel:
    """A policy ready to use (eval mode, on the requested device) and what it is."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    info: ModelInfo


def load_model(source: ModelSource, checkpoint_root: Path | None = None, *,
               device: str = "cpu") -> LoadedModel:
    """Build or read the model `source` names; ModelSourceError when it cannot be found."""
    model, tokenizer = _load(source, checkpoint_root)
    model = model.to(device=device, dtype=torch_dtype(source.precision)).eval()
    return LoadedModel(model=model, tokenizer=tokenizer, info=describe_model(model, tokenizer))


def _load(source: ModelSource, checkpoint_root: Path | None) -> tuple[Any, Any]:
    if source.kind == ModelKind.BUILTIN:
        return build_builtin(source.name, source.seed), build_byte_tokenizer()
    if source.kind == ModelKind.LOCAL:
        return _load_local(Path(source.path), Path(source.tokenizer_path or source.path))
    return _load_checkpoint(source.name, checkpoint_root)


def build_builtin(name: str, seed: int) -> PreTrainedModel:
    """The builtin model `name` initialised from `seed` (the global RNG is left untouched)."""
    spec = BUILTIN_MODELS.get(name)
    if spec is None:
        raise ModelSourceError("name", f"unknown builtin model {name!r}; builtin models: "
                               f"{', '.join(sorted(BUILTIN_MODELS))}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return spec.model_cls(spec.config())


def _load_local(model_dir: Path, tokenizer_dir: Path) -> tuple[Any, Any]:
    """ModelSourceError, one message whether the directory is missing or holds no model (so the
    answer never tells what exists on the worker), for whatever transformers raises."""
    for field_name, directory in (("path", model_dir), ("tokenizer_path", tokenizer_dir)):
        if not directory.is_dir():
            raise not_a_model_directory(field_name, directory)
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - ValueError, OSError, JSON and safetensors errors alike
        raise not_a_model_directory("path", model_dir) from error
    return model, load_directory_tokenizer(tokenizer_dir, "tokenizer_path")


def _load_checkpoint(checkpoint_id: str, root: Path | None) -> tuple[Any, Any]:
    """model/ when the checkpoint has one, else the base with adapter/ merged into it."""
    if root is None:
        raise ModelSourceError("name", "a checkpoint source needs the checkpoint root")
    manifest = checkpoints.read_manifest(root, checkpoint_id)
    directory = checkpoints.checkpoint_path(root, checkpoint_id)
    if (directory / checkpoints.MODEL_DIR).is_dir():
        return _load_local(directory / checkpoints.MODEL_DIR, directory / checkpoints.MODEL_DIR)
    base = load_model(manifest.base, root)
    adapted = PeftModel.from_pretrained(base.model, directory / checkpoints.ADAPTER_DIR)
    return adapted.merge_and_unload(), base.tokenizer


def torch_dtype(precision: str) -> torch.dtype:
    """The torch dtype of a Precision value (DEFAULT = float32)."""
    return DTYPES[Precision(precision)]


def apply_lora(model: PreTrainedModel, spec: LoraSpec, *, adapter_name: str = "default") -> PeftModel:
    """Wrap `model` with a fresh LoRA adapter; only adapter parameters stay trainable."""
    try:
        return get_peft_model(model, lora_config(spec), adapter_name=adapter_name)
    except ValueError as error:  # peft: "Target modules {...} not found in the base model"
        raise ModelSourceError("target_modules", str(error)) from error


def add_lora_adapter(model: PeftModel, spec: LoraSpec, adapter_name: str) -> None:
    """One more fresh (zero-effect) LoRA adapter on a peft model, beside the ones it holds."""
    try:
        model.add_adapter(adapter_name, lora_config(spec))
    except ValueError as error:
        raise ModelSourceError("target_modules", str(error)) from error


def lora_config(spec: LoraSpec) -> LoraConfig:
    return LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                      target_modules=list(spec.target_modules) or ALL_LINEAR, task_type="CAUSAL_LM")


def describe_model(model: Any, tokenizer: PreTrainedTokenizerBase) -> ModelInfo:
    """Parameter counts, vocabulary, context length and stop tokens of a (peft) model."""
    config = model.config
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    return ModelInfo(
        architecture=type(base).__name__,
        parameter_count=sum(p.numel() for p in model.parameters()),
        trainable_parameter_count=sum(p.numel() for p in model.parameters() if p.requires_grad),
        vocab_size=int(config.vocab_size),
        max_context_length=int(getattr(config, "max_position_embeddings", 0) or 0),
        stop_token_ids=_stop_token_ids(config, tokenizer))


def _stop_token_ids(config: Any, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    ids = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    ids = [*ids, tokenizer.eos_token_id]
    return tuple(sorted({int(i) for i in ids if i is not None}))


def merged_copy(model: Any) -> PreTrainedModel:
    """A plain model with the policy's current weights (LoRA merged into a copy of the base)."""
    if isinstance(model, PeftModel):
        return copy.deepcopy(model).merge_and_unload()
    return model


def save_model_dir(model: Any, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    """Write an HF model directory (weights, config, tokenizer) that from_pretrained loads."""
    directory = Path(directory)
    merged_copy(model).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def save_builtin_as_local(name: str, seed: int, directory: Path) -> Path:
    """Write builtin `name`/`seed` as an HF directory loadable with no OpenTinker code."""
    return save_model_dir(build_builtin(name, seed), build_byte_tokenizer(), Path(directory))


def quiet_transformers() -> None:
    """No progress bars or info chatter from transformers (services log JSON lines only)."""
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
