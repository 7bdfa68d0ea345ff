"""Weights as a byte stream: a package (tensor specs + sha256 + chunks) and its assembler.

The sender (Trainer.ExportWeights) calls `state_dict_to_package`; the receiver
(Rollout.UpdateWeights) feeds each chunk to a `WeightsAssembler` and calls `finish()`.
Tensors travel as little-endian bytes in spec order; the sha256 covers all chunk bytes in
that order. Dtype names are "float32", "bfloat16", "float16".
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from peft import get_peft_model_state_dict, set_peft_model_state_dict

from opentinker.ml.errors import WeightsError

DEFAULT_CHUNK_BYTES = 1 << 20
DTYPE_BY_NAME = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
NAME_BY_DTYPE = {dtype: name for name, dtype in DTYPE_BY_NAME.items()}


@dataclass(frozen=True, kw_only=True)
class TensorSpec:
    """One tensor of a package (twin of common.v1.TensorSpec)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    byte_length: int


class Chunk(NamedTuple):
    """A slice of one tensor's bytes (twin of common.v1.WeightsChunk)."""

    tensor_name: str
    offset: int
    data: bytes


class WeightsPackage(NamedTuple):
    """What a sender streams: the header's specs and sha256, then `chunks`."""

    specs: list[TensorSpec]
    sha256: str
    chunks: Iterator[Chunk]

    @property
    def total_bytes(self) -> int:
        return sum(spec.byte_length for spec in self.specs)


def state_dict_to_package(state_dict: Mapping[str, torch.Tensor], *,
                          chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> WeightsPackage:
    """Specs, sha256 and a lazy chunk iterator (chunks of at most `chunk_bytes`).

    The tensors are read twice (hash now, chunks later): do not change them in between.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    specs = [tensor_spec(name, tensor) for name, tensor in state_dict.items()]
    digest = hashlib.sha256()
    for tensor in state_dict.values():
        digest.update(tensor_bytes(tensor))
    return WeightsPackage(specs, digest.hexdigest(), _chunks(state_dict, chunk_bytes))


def tensor_spec(name: str, tensor: torch.Tensor) -> TensorSpec:
    if tensor.dtype not in NAME_BY_DTYPE:
        raise WeightsError(f"tensor {name!r} has unsupported dtype {tensor.dtype}")
    return TensorSpec(name=name, dtype=NAME_BY_DTYPE[tensor.dtype], shape=tuple(tensor.shape),
                      byte_length=tensor.numel() * tensor.element_size())


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's little-endian bytes (a view of a contiguous CPU copy)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def _chunks(state_dict: Mapping[str, torch.Tensor], chunk_bytes: int) -> Iterator[Chunk]:
    for name, tensor in state_dict.items():
        data = tensor_bytes(tensor)
        for offset in range(0, max(len(data), 1), chunk_bytes):
            yield Chunk(name, offset, bytes(data[offset:offset + chunk_bytes]))


class WeightsAssembler:
    """Collects chunks of a package in order and rebuilds the state dict after checking it."""

    def __init__(self, specs: Sequence[TensorSpec], sha256: str) -> None:
        self.specs = list(specs)
        self.sha256 = sha256
        self._buffers = {spec.name: bytearray() for spec in self.specs}
        self._by_name = {spec.name: spec for spec in self.specs}
        if len(self._by_name) != len(self.specs):
            raise WeightsError("the header lists a tensor name more than once")

    def add(self, tensor_name: str, offset: int, data: bytes) -> None:
        """Append one chunk; WeightsError for an unknown tensor, a gap or an overflow."""
        spec = self._by_name.get(tensor_name)
        if spec is None:
            raise WeightsError(f"chunk for tensor {tensor_name!r} that the header does not list")
        buffer = self._buffers[tensor_name]
        if offset != len(buffer):
            raise WeightsError(f"chunk of {tensor_name!r} at offset {offset}, expected {len(buffer)}")
        if offset + len(data) > spec.byte_length:
            raise WeightsError(f"chunks of {tensor_name!r} exceed its {spec.byte_length} bytes")
        buffer += data

    def finish(self) -> dict[str, torch.Tensor]:
        """The state dict; WeightsError when a tensor is short or the sha256 differs."""
        for spec in self.specs:
            received = len(self._buffers[spec.name])
            if received != spec.byte_length:
                raise WeightsError(f"tensor {spec.name!r} got {received} of {spec.byte_length} bytes")
        digest = hashlib.sha256()
        for spec in self.specs:
            digest.update(self._buffers[spec.name])
        if digest.hexdigest() != self.sha256:
            raise WeightsError(f"sha256 mismatch: header {self.sha256}, received {digest.hexdigest()}")
        return {spec.name: _to_tensor(spec, self._buffers[spec.name]) for spec in self.specs}


def _to_tensor(spec: TensorSpec, buffer: bytearray) -> torch.Tensor:
    if spec.dtype not in DTYPE_BY_NAME:
        raise WeightsError(f"tensor {spec.name!r} has unsupported dtype {spec.dtype!r}")
    if not buffer:
        return torch.empty(spec.shape, dtype=DTYPE_BY_NAME[spec.dtype])
    flat = torch.frombuffer(buffer, dtype=DTYPE_BY_NAME[spec.dtype]).clone()
    return flat.reshape(spec.shape)


def lora_state_dict(model: Any, adapter_name: str = "default") -> dict[str, torch.Tensor]:
    """The tensors of one adapter of a peft model (names without the adapter name)."""
    return dict(get_peft_model_state_dict(model, adapter_name=adapter_name))


def load_lora_state_dict(model: Any, state_dict: Mapping[str, torch.Tensor],
                         adapter_name: str = "default") -> None:
    """Copy tensors into one adapter of a peft model; WeightsError on names or shapes it lacks."""
    expected = lora_state_dict(model, adapter_name)
    unknown = sorted(set(state_dict) - set(expected))
    if unknown or set(expected) - set(state_dict):
        raise WeightsError(f"adapter tensors do not match the model: unknown {unknown[:3]}, "
                           f"missing {sorted(set(expected) - set(state_dict))[:3]}")
    for name, tensor in state_dict.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise WeightsError(f"adapter tensor {name!r} has shape {tuple(tensor.shape)}, "
                               f"the model expects {tuple(expected[name].shape)}")
    set_peft_model_state_dict(model, dict(state_dict), adapter_name=adapter_name)
