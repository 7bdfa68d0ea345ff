"""The policy tests' kit (test_policies.py and the weight-update, adapter and logprob tests):
the LoRA spec and prompt they use, a reference LoRA model, weight transfers and a registry."""

from __future__ import annotations

from pathlib import Path

import torch

from opentinker_runtime.ml.models import apply_lora, build_builtin
from opentinker_runtime.ml.sources import LoraSpec
from opentinker_runtime.ml.weights import state_dict_to_package
from opentinker_rollout.engine import GenerationRequest, SamplingConfig
from opentinker_rollout.policies import PolicyRegistry, WeightsChunk, WeightsFormat, WeightsHeader
from opentinker_rollout.transformers_engine import TransformersEngine
from tests.rollout._support import MODEL_NAME, tiny_model

LORA = LoraSpec(rank=4, alpha=8.0)
PROMPT = tuple(range(40, 60))
GREEDY = SamplingConfig(max_new_tokens=12, temperature=0.0)


def lora_reference(spec: LoraSpec = LORA, seed: int = 1) -> torch.nn.Module:
    """The builtin model with an adapter whose weights are random (not the zero init)."""
    model = apply_lora(build_builtin(MODEL_NAME, 0), spec).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model


def transfer(state_dict, version: int, fmt=WeightsFormat.LORA_ADAPTER, sha256=None):
    package = state_dict_to_package(state_dict, chunk_bytes=4096)
    header = WeightsHeader(format=fmt, policy_version=version, tensors=tuple(package.specs),
                           total_bytes=package.total_bytes, sha256=sha256 or package.sha256)

    async def chunks():
        for chunk in package.chunks:
            yield WeightsChunk(tensor_name=chunk.tensor_name, offset=chunk.offset, data=chunk.data)
    return header, chunks()


def reference_greedy(model: torch.nn.Module):
    engine = TransformersEngine(model, tiny_model().tokenizer)
    return engine.generate([GenerationRequest(prompt_ids=PROMPT, sampling=GREEDY)])[0][0]


def registry(tmp_path: Path) -> PolicyRegistry:
    return PolicyRegistry(checkpoint_root=tmp_path, default_max_batch_size=8)
