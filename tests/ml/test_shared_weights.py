"""Shared-memory weight files: the writer's layout and cleanup, and every way the receiver refuses
a file (a name outside its directory, a link, a missing, truncated, foreign or corrupt file)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import xxhash
from safetensors.torch import load_file

from opentinker_runtime.ml.errors import WeightsError
from opentinker_runtime.ml.shared_weights import (SharedFileNotAllowed, SharedFileUnavailable, SharedWeightsWriter,
                                          read_shared_weights, remove_dead_owners)
from opentinker_runtime.ml.weights import ChecksumAlgorithm, WeightsChecksum, state_dict_to_package
from tests.ml._checksums import MIB, reference_chunked_xxh3


def sample_state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"a.weight": torch.randn(7, 5, generator=g),
            "b.bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
            "c.half": torch.randn(9, generator=g).to(torch.float16),
            "d.scalar": torch.tensor(2.5), "e.empty": torch.zeros(0, 3)}


@pytest.fixture
def writer(tmp_path: Path):
    writer = SharedWeightsWriter(tmp_path / "shm")
    writer.open()
    yield writer
    writer.close()


def read(writer: SharedWeightsWriter, written, **changes):
    return read_shared_weights(writer.root, replace(written.file, **changes), written.specs, written.checksum)


def several_chunks() -> dict[str, torch.Tensor]:
    """2 x 8 MiB + 4 KiB of tensors, their boundaries off the chunks' (a tensor spans one)."""
    g = torch.Generator().manual_seed(1)
    return {"a.weight": torch.randn(MIB + 3, generator=g), "b.half": torch.randn(4 * MIB, generator=g).half(),
            "c.weight": torch.randn(MIB + 1021, generator=g)}


def data_section(path: Path) -> tuple[int, bytes]:
    """(where the data section starts, its bytes) of a safetensors file."""
    raw = path.read_bytes()
    start = 8 + struct.unpack_from("<Q", raw)[0]
    return start, raw[start:]


def test_round_trip_is_bit_identical_and_the_file_is_read_once(writer) -> None:
    state = sample_state()
    written = writer.write(state)
    path = writer.root / written.file.name
    assert path.stat().st_mode & 0o777 == 0o600 and writer.directory.stat().st_mode & 0o777 == 0o700
    assert list(load_file(str(path))) == list(state)  # a plain safetensors file
    assert written.checksum == state_dict_to_package(state).checksum  # what a stream would carry
    received = read(writer, written)
    assert list(received) == list(state)
    for name, tensor in state.items():
        assert received[name].dtype == tensor.dtype and torch.equal(received[name], tensor), name
    assert not path.exists()
    with pytest.raises(SharedFileUnavailable, match="does not exist"):
        read(writer, written)


@pytest.mark.parametrize("name", ["../escape/x.safetensors", "/etc/passwd", "owner/../../x.safetensors",
                                  "owner/x.txt", "x.safetensors", "a/b/c.safetensors", "owner/.x.safetensors"])
def test_a_name_outside_the_directory_is_refused(writer, name: str) -> None:
    written = writer.write(sample_state())
    with pytest.raises(SharedFileNotAllowed, match="is not '<owner>/<file>.safetensors'"):
        read(writer, written, name=name)


def test_symbolic_links_below_the_root_are_refused(writer, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    elsewhere = SharedWeightsWriter(outside)
    elsewhere.open()
    written = elsewhere.write(sample_state())
    (writer.root / "linked-dir").symlink_to(elsewhere.directory)  # a directory link out of the root
    with pytest.raises(SharedFileNotAllowed, match="symbolic link"):
        read(writer, written, name=f"linked-dir/{Path(written.file.name).name}")
    os.symlink(outside / written.file.name, writer.directory / "link.safetensors")  # a file link
    with pytest.raises(SharedFileNotAllowed, match="symbolic link"):
        read(writer, written, name=f"{writer.owner}/link.safetensors")
    assert (outside / written.file.name).exists()  # nothing was read or deleted out there


def test_a_missing_truncated_or_foreign_file_is_unavailable_and_left_alone(writer) -> None:
    written = writer.write(sample_state())
    with pytest.raises(SharedFileUnavailable, match="does not exist .* on this host"):
        read(writer, written, name=f"{writer.owner}/{'0' * 32}.safetensors")
    path = writer.root / written.file.name
    with pytest.raises(SharedFileUnavailable, match="the header says"):
        read(writer, written, size_bytes=written.file.size_bytes + 1)
    with pytest.raises(SharedFileUnavailable, match="nonce differs"):
        read(writer, written, nonce="f" * 32)
    assert path.exists()  # not the header's file: not deleted
    os.truncate(path, written.file.size_bytes - 3)
    with pytest.raises(SharedFileUnavailable, match="truncated"):
        read(writer, written)


def test_a_corrupt_file_is_refused_and_deleted(writer) -> None:
    written = writer.write(sample_state())
    path = writer.root / written.file.name
    with open(path, "r+b") as f:
        f.seek(written.file.size_bytes - 10)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(WeightsError, match="xxh3_64_chunked mismatch"):
        read(writer, written)
    assert not path.exists()


def test_the_files_checksum_is_the_chunked_xxh3_of_its_data_section(writer) -> None:
    state = several_chunks()
    written = writer.write(state)
    _, data = data_section(writer.root / written.file.name)
    assert len(data) == 16 * MIB + 4096
    assert written.checksum == WeightsChecksum(algorithm=ChecksumAlgorithm.XXH3_64_CHUNKED,
                                               hex_digest=reference_chunked_xxh3(data))
    assert written.checksum == state_dict_to_package(state).checksum
    received = read(writer, written)
    assert all(torch.equal(received[name], tensor) for name, tensor in state.items())


@pytest.mark.parametrize("position", [0, 4 * MIB + 4, 8 * MIB - 1, 8 * MIB, 16 * MIB - 1, 16 * MIB, 16 * MIB + 4095])
def test_one_changed_byte_anywhere_in_the_data_is_refused(writer, position: int) -> None:
    """Chunk boundaries (8 MiB, 16 MiB) on both sides, the first and the last byte included."""
    written = writer.write(several_chunks())
    path = writer.root / written.file.name
    start, _ = data_section(path)
    with open(path, "r+b") as f:
        f.seek(start + position)
        byte = f.read(1)
        f.seek(start + position)
        f.write(bytes([byte[0] ^ 0x80]))
    with pytest.raises(WeightsError, match="xxh3_64_chunked mismatch"):
        read(writer, written)
    assert not path.exists()


def test_an_earlier_senders_one_pass_xxh3_64_is_accepted(writer) -> None:
    written = writer.write(sample_state())
    _, data = data_section(writer.root / written.file.name)
    earlier = replace(written, checksum=WeightsChecksum(algorithm=ChecksumAlgorithm.XXH3_64,
                                                        hex_digest=xxhash.xxh3_64_hexdigest(data)))
    assert list(read(writer, earlier)) == list(sample_state())


def test_an_index_that_differs_from_the_header_is_refused(writer) -> None:
    written = writer.write(sample_state())
    specs = [replace(written.specs[0], name="other.weight"), *written.specs[1:]]
    with pytest.raises(WeightsError, match="index differs from the header's tensors"):
        read_shared_weights(writer.root, written.file, specs, written.checksum)


def test_files_are_removed_by_name_by_age_and_with_the_writer(writer) -> None:
    first, second = writer.write(sample_state()), writer.write(sample_state())
    writer.remove(first.file.name)
    assert writer.files() == [second.file.name]
    assert writer.remove_older_than(3600) == []
    os.utime(writer.root / second.file.name, (1, 1))
    assert writer.remove_older_than(3600) == [second.file.name] and writer.files() == []
    writer.write(sample_state())
    writer.close()
    assert not writer.directory.exists()


def test_a_new_writer_removes_the_directories_of_dead_writers_only(tmp_path: Path) -> None:
    root = tmp_path / "shm"
    dead_pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                                  capture_output=True, text=True, check=True).stdout)
    (root / f"trainer-{dead_pid}-0abc").mkdir(parents=True)
    (root / f"trainer-{dead_pid}-0abc" / "leaked.safetensors").write_bytes(b"x")
    alive = SharedWeightsWriter(root)
    alive.open()
    alive.write(sample_state())
    (root / "unrelated").mkdir()
    restarted = SharedWeightsWriter(root)
    restarted.open()
    assert sorted(p.name for p in root.iterdir()) == sorted([alive.owner, restarted.owner, "unrelated"])
    assert len(alive.files()) == 1
    assert remove_dead_owners(root) == []


def reference_index(state: dict[str, torch.Tensor], nonce: str, **dumps) -> bytes:
    """A safetensors index built from scratch (json.dumps of the whole index, as first written)."""
    entries: dict[str, object] = {"__metadata__": {"opentinker_nonce": nonce}}
    offset = 0
    for name, tensor in state.items():
        size = tensor.numel() * tensor.element_size()
        entries[name] = {"dtype": {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}[tensor.dtype],
                         "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, **dumps).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def one_dtype_state(rows: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(rows)
    return {"a.lora_A": torch.randn(rows, 8, generator=g), "b.scalar": torch.tensor(1.5),
            "c.empty": torch.zeros(0, 4), "d.lora_B": torch.randn(8, rows, generator=g)}


def test_each_layout_gets_its_own_index_and_tensors_when_layouts_alternate(writer) -> None:
    """Index entries are remembered per layout: writing and reading layouts in turn never mixes them."""
    for state in (one_dtype_state(3), sample_state(), one_dtype_state(5), one_dtype_state(3), sample_state()):
        written = writer.write(state)
        raw = (writer.root / written.file.name).read_bytes()
        index = reference_index(state, written.file.nonce, separators=(",", ":"))
        assert raw[:len(index)] == index
        received = read(writer, written)
        assert list(received) == list(state)
        for name, tensor in state.items():
            assert received[name].shape == tensor.shape and torch.equal(received[name], tensor), name


def test_an_index_written_another_way_is_read_too(writer) -> None:
    """Another writer's JSON (spaces, its own order of keys) with the same entries is accepted;
    its nonce and entries are still checked."""
    state = one_dtype_state(4)
    written = writer.write(state)
    path = writer.root / written.file.name
    _, data = data_section(path)
    index = reference_index(dict(reversed(state.items())), written.file.nonce)  # spaces, other order
    entries = json.loads(index[8:])
    offset = 0
    for name, tensor in state.items():  # the data stays in the header's order
        entries[name]["data_offsets"] = [offset, offset + tensor.numel() * 4]
        offset += tensor.numel() * 4
    text = json.dumps(entries).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    other = replace(written, file=replace(written.file, size_bytes=path.stat().st_size))
    with pytest.raises(SharedFileUnavailable, match="nonce differs"):
        read(writer, other, nonce="e" * 32)
    received = read(writer, other)
    assert all(torch.equal(received[name], tensor) for name, tensor in state.items())
