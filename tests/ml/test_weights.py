"""Weights packages: round trip through chunks, and every way an assembly can be wrong."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from opentinker.ml.errors import WeightsError
from opentinker.ml.models import LoraSpec, apply_lora, build_builtin
from opentinker.ml.weights import (ChecksumAlgorithm, WeightsAssembler, WeightsChecksum, load_lora_state_dict, lora_state_dict,
                                   state_dict_to_package)


def sample_state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"a.weight": torch.randn(7, 5, generator=g),
            "b.bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
            "c.half": torch.randn(9, generator=g).to(torch.float16),
            "d.scalar": torch.tensor(2.5), "e.empty": torch.zeros(0, 3)}


def assemble(package, mutate=lambda chunk: chunk):
    assembler = WeightsAssembler(package.specs, package.checksum)
    for chunk in package.chunks:
        assembler.add(*mutate(chunk))
    return assembler.finish()


@pytest.mark.parametrize("chunk_bytes", [1, 16, 1 << 20])
def test_round_trip_in_chunks_of_at_most_chunk_bytes(chunk_bytes: int) -> None:
    state = sample_state()
    package = state_dict_to_package(state, chunk_bytes=chunk_bytes)
    chunks = list(package.chunks)
    assert all(len(c.data) <= chunk_bytes for c in chunks)
    assert sum(len(c.data) for c in chunks) == package.total_bytes == 7 * 5 * 4 + 12 * 2 + 9 * 2 + 4
    assert [s.dtype for s in package.specs] == ["float32", "bfloat16", "float16", "float32", "float32"]
    rebuilt = assemble(replace(package, chunks=iter(chunks)))
    assert rebuilt.keys() == state.keys()
    for name, tensor in state.items():
        assert rebuilt[name].dtype == tensor.dtype and torch.equal(rebuilt[name], tensor), name


def test_same_weights_same_checksum_and_a_changed_weight_changes_it() -> None:
    state = sample_state()
    first = state_dict_to_package(state).checksum
    assert first.algorithm is ChecksumAlgorithm.XXH3_64 and len(first.hex_digest) == 16
    assert state_dict_to_package(sample_state()).checksum == first
    state["a.weight"][0, 0] += 1
    assert state_dict_to_package(state).checksum != first


def test_sha_mismatch_is_refused() -> None:
    package = state_dict_to_package(sample_state(), chunk_bytes=8)

    def flip(chunk):
        if chunk.offset != 8:
            return chunk
        return chunk._replace(data=bytes([chunk.data[0] ^ 1]) + chunk.data[1:])

    with pytest.raises(WeightsError, match="xxh3_64 mismatch"):
        assemble(package, flip)


def test_wrong_header_sha_is_refused() -> None:
    package = state_dict_to_package(sample_state())
    with pytest.raises(WeightsError, match="xxh3_64 mismatch"):
        assemble(replace(package, checksum=WeightsChecksum(algorithm=ChecksumAlgorithm.XXH3_64,
                                                           hex_digest="0" * 16)))


def test_an_older_senders_sha256_is_still_checked() -> None:
    package = state_dict_to_package(sample_state(), chunk_bytes=8)
    assembler = WeightsAssembler(package.specs, package.sha256)
    for chunk in package.chunks:
        assembler.add(*chunk)
    assert assembler.finish().keys() == sample_state().keys()
    assembler = WeightsAssembler(package.specs, "0" * 64)
    for chunk in state_dict_to_package(sample_state()).chunks:
        assembler.add(*chunk)
    with pytest.raises(WeightsError, match="sha256 mismatch"):
        assembler.finish()


def test_chunks_out_of_tensor_order_are_checked_as_well() -> None:
    package = state_dict_to_package(sample_state(), chunk_bytes=8)
    chunks = list(package.chunks)
    assembler = WeightsAssembler(package.specs, package.checksum)
    for chunk in sorted(chunks, key=lambda c: (c.tensor_name != "c.half", chunks.index(c))):
        assembler.add(*chunk)
    rebuilt = assembler.finish()
    assert all(torch.equal(rebuilt[name], tensor) for name, tensor in sample_state().items())


def test_a_byte_length_that_does_not_match_dtype_and_shape_is_refused() -> None:
    package = state_dict_to_package(sample_state())
    specs = [replace(package.specs[0], byte_length=1 << 40), *package.specs[1:]]
    with pytest.raises(WeightsError, match="byte_length 1099511627776 but float32 of shape"):
        WeightsAssembler(specs, package.checksum)


def test_unknown_gap_overflow_and_short_tensors_are_refused() -> None:
    package = state_dict_to_package(sample_state(), chunk_bytes=8)
    assembler = WeightsAssembler(package.specs, package.checksum)
    with pytest.raises(WeightsError, match="does not list"):
        assembler.add("z.unknown", 0, b"1234")
    with pytest.raises(WeightsError, match="expected 0"):
        assembler.add("a.weight", 8, b"12345678")
    assembler.add("d.scalar", 0, b"1234")
    with pytest.raises(WeightsError, match="exceed"):
        assembler.add("d.scalar", 4, b"1")
    with pytest.raises(WeightsError, match="'a.weight' got 0 of 140 bytes"):
        assembler.finish()


def test_lora_state_dict_moves_an_adapter_between_models() -> None:
    source = apply_lora(build_builtin("tiny-qwen2", 0), LoraSpec(rank=2))
    with torch.no_grad():
        for name, parameter in source.named_parameters():
            if "lora_" in name:
                parameter.uniform_(-0.1, 0.1)
    target = apply_lora(build_builtin("tiny-qwen2", 0), LoraSpec(rank=2))
    state = lora_state_dict(source)
    assert state and all("lora_" in name for name in state)
    load_lora_state_dict(target, assemble(state_dict_to_package(state, chunk_bytes=100)))
    tokens = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(source(input_ids=tokens).logits, target(input_ids=tokens).logits)


def test_lora_state_dict_of_another_rank_is_refused() -> None:
    target = apply_lora(build_builtin("tiny-qwen2", 0), LoraSpec(rank=2))
    other = lora_state_dict(apply_lora(build_builtin("tiny-qwen2", 0), LoraSpec(rank=4)))
    with pytest.raises(WeightsError, match="shape"):
        load_lora_state_dict(target, other)
    with pytest.raises(WeightsError, match="unknown"):
        load_lora_state_dict(target, {**lora_state_dict(target), "x.lora_A.weight": torch.zeros(1)})
