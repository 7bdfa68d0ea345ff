"""Weights packages: round trip through chunks, the chunked checksum against its definition,
and every way an assembly can be wrong."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from dataclasses import replace

import pytest
import torch
import xxhash

from opentinker_runtime.ml import weights
from opentinker_runtime.ml.errors import WeightsError
from opentinker_runtime.ml.models import LoraSpec, apply_lora, build_builtin
from opentinker_runtime.ml.weights import (CHECKSUM_CHUNK_BYTES, ChecksumAlgorithm, ChunkedXXH3, WeightsAssembler, WeightsChecksum,
                                   hexdigest_of, load_lora_state_dict, lora_state_dict, state_dict_to_package,
                                   tensor_bytes)
from tests.ml._checksums import MIB, reference_chunked_xxh3


def random_bytes(size: int, seed: int = 0) -> bytes:
    return torch.randint(0, 256, (size,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)).numpy().tobytes()


def flip_byte(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1:]


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
    assert first.algorithm is ChecksumAlgorithm.XXH3_64_CHUNKED and len(first.hex_digest) == 16
    assert state_dict_to_package(sample_state()).checksum == first
    state["a.weight"][0, 0] += 1
    assert state_dict_to_package(state).checksum != first


def test_sha_mismatch_is_refused() -> None:
    package = state_dict_to_package(sample_state(), chunk_bytes=8)

    def flip(chunk):
        if chunk.offset != 8:
            return chunk
        return chunk._replace(data=bytes([chunk.data[0] ^ 1]) + chunk.data[1:])

    with pytest.raises(WeightsError, match="xxh3_64_chunked mismatch"):
        assemble(package, flip)


def test_wrong_header_sha_is_refused() -> None:
    package = state_dict_to_package(sample_state())
    with pytest.raises(WeightsError, match="xxh3_64_chunked mismatch"):
        assemble(replace(package, checksum=WeightsChecksum(algorithm=ChecksumAlgorithm.XXH3_64_CHUNKED,
                                                           hex_digest="0" * 16)))


@pytest.mark.parametrize("size", [0, 1, 8 * MIB - 1, 8 * MIB, 8 * MIB + 1, 16 * MIB + 12345])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_chunked_checksum_equals_its_definition(size: int, threads: int, monkeypatch) -> None:
    assert CHECKSUM_CHUNK_BYTES == 8 * MIB  # part of the wire format
    monkeypatch.setattr(weights, "HASH_THREADS", threads)
    data = random_bytes(size)
    expected = reference_chunked_xxh3(data)
    cuts = sorted({0, size, *(c for c in (3, MIB + 7, 8 * MIB - 5, 8 * MIB, 8 * MIB + 2, 15 * MIB) if c < size)})
    pieces = [memoryview(data)[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    incremental = ChunkedXXH3()
    for piece in pieces:
        incremental.update(piece)
    assert incremental.hexdigest() == expected
    assert hexdigest_of(pieces, ChecksumAlgorithm.XXH3_64_CHUNKED) == expected
    assert hexdigest_of([data], ChecksumAlgorithm.XXH3_64_CHUNKED) == expected
    if size > 8 * MIB:  # one chunk's digest, or one pass over everything, is another checksum
        assert expected not in (xxhash.xxh3_64_hexdigest(data), reference_chunked_xxh3(data[:8 * MIB]))


def test_a_package_of_several_chunks_carries_the_defined_checksum() -> None:
    state = {"a": torch.randn(3 * MIB // 4 + 5), "b": torch.randn(7 * MIB).to(torch.float16),
             "c": torch.randn(1000)}
    data = b"".join(tensor.numpy().tobytes() for tensor in state.values())
    assert len(data) > 2 * 8 * MIB
    assert state_dict_to_package(state).checksum == WeightsChecksum(
        algorithm=ChecksumAlgorithm.XXH3_64_CHUNKED, hex_digest=reference_chunked_xxh3(data))


@pytest.mark.parametrize("position", [0, 8 * MIB - 1, 8 * MIB, 16 * MIB - 1, 16 * MIB, 16 * MIB + 99])
def test_a_stream_with_one_changed_byte_anywhere_is_refused(position: int) -> None:
    """Every chunk's first and last byte included: the byte a chunk boundary cuts is covered."""
    package = state_dict_to_package({"w": torch.randn(8 * MIB + 50).to(torch.float16)})  # 2 x 8 MiB + 100 bytes

    def flip(chunk):
        if chunk.offset <= position < chunk.offset + len(chunk.data):
            return chunk._replace(data=flip_byte(chunk.data, position - chunk.offset))
        return chunk

    with pytest.raises(WeightsError, match="xxh3_64_chunked mismatch"):
        assemble(package, flip)


def test_an_earlier_senders_one_pass_xxh3_64_is_still_checked() -> None:
    state = sample_state()
    data = b"".join(bytes(tensor_bytes(tensor)) for tensor in state.values())
    package = state_dict_to_package(state, chunk_bytes=8)
    earlier = WeightsChecksum(algorithm=ChecksumAlgorithm.XXH3_64, hex_digest=xxhash.xxh3_64_hexdigest(data))
    assert assemble(replace(package, checksum=earlier)).keys() == state.keys()
    with pytest.raises(WeightsError, match="xxh3_64 mismatch"):
        assemble(replace(state_dict_to_package(state, chunk_bytes=8), checksum=replace(earlier, hex_digest="0" * 16)))


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


@pytest.mark.parametrize("which", [0, -1], ids=["first", "last"])
def test_lora_state_dict_follows_an_adapter_parameter_replaced_after_the_first_call(which: int) -> None:
    """The remembered parameters are checked against the model (re-adding an adapter replaces them)."""
    model = apply_lora(build_builtin("tiny-qwen2", 0), LoraSpec(rank=2))
    names = list(lora_state_dict(model))
    full_name = [name for name, _ in model.named_parameters() if "lora_" in name][which]
    module_name, _, leaf = full_name.rpartition(".")
    replaced = model.get_parameter(full_name)  # still alive elsewhere: only the model no longer holds it
    replacement = torch.nn.Parameter(torch.full_like(replaced, 0.25))
    setattr(model.get_submodule(module_name), leaf, replacement)
    state = lora_state_dict(model)
    assert list(state) == names and torch.equal(state[names[which]], replacement.detach())
    assert not torch.equal(replaced, replacement)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_hashes_chunks_in_parallel_too() -> None:
    """The hash pool's threads stay in the parent: a child that inherited a used pool starts its
    own instead of waiting forever for threads that do not exist there."""
    data = random_bytes(16 * MIB + 1)
    expected = reference_chunked_xxh3(data)
    assert hexdigest_of([data], ChecksumAlgorithm.XXH3_64_CHUNKED) == expected  # the pool is in use
    pid = os.fork()
    if pid == 0:
        ok = weights.HASH_THREADS == 1 or hexdigest_of([data], ChecksumAlgorithm.XXH3_64_CHUNKED) == expected
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 30
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if waited[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child's checksum hung")
    assert os.waitstatus_to_exitcode(waited[1]) == 0


def test_a_busy_hash_pool_never_stalls_a_checksum(monkeypatch, tmp_path) -> None:
    """Chunks offered to the pool that no pool thread started are hashed by the caller (a loaded
    machine), so a checksum never waits for a pool thread to get a core."""
    from opentinker_runtime.ml.shared_weights import SharedWeightsWriter

    monkeypatch.setattr(weights, "HASH_THREADS", 2)
    release = threading.Event()
    blockers = [weights.hash_pool().submit(release.wait, 60) for _ in range(weights.hash_pool()._max_workers)]
    try:
        data = random_bytes(24 * MIB + 7)
        assert hexdigest_of([data], ChecksumAlgorithm.XXH3_64_CHUNKED) == reference_chunked_xxh3(data)
        writer = SharedWeightsWriter(tmp_path / "shm")
        writer.open()
        state = {"w": torch.frombuffer(bytearray(data[:24 * MIB]), dtype=torch.float32)}
        assert writer.write(state).checksum.hex_digest == reference_chunked_xxh3(data[:24 * MIB])
        assert not any(blocker.done() for blocker in blockers)  # all of it done while the pool was busy
    finally:
        release.set()


@pytest.mark.parametrize("make", [
    lambda: torch.randn(6, 5), lambda: torch.randn(6, 5).t(), lambda: torch.randn(10)[3:8],
    lambda: torch.randn(4, 3).to(torch.bfloat16), lambda: torch.tensor(2.5), lambda: torch.zeros(0, 3),
    lambda: torch.nn.Parameter(torch.randn(3, 2))], ids=["contiguous", "transposed", "offset view", "bf16",
                                                         "scalar", "empty", "parameter"])
def test_tensor_bytes_are_the_tensors_bytes_in_order_and_outlive_it(make) -> None:
    tensor = make()
    expected = tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
    view = tensor_bytes(tensor)
    assert view.format == "B" and view.ndim == 1 and bytes(view) == expected
    del tensor
    gc.collect()
    torch.randn(1 << 16)  # reuse freed memory, if the view had not kept it
    assert bytes(view) == expected


def test_tensor_bytes_of_a_contiguous_cpu_tensor_view_its_memory() -> None:
    tensor = torch.zeros(4)
    view = tensor_bytes(tensor)
    tensor[1] = 1.0
    assert bytes(view[4:8]) == torch.tensor([1.0]).numpy().tobytes()
