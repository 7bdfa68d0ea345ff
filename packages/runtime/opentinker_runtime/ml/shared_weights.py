"""Weights through shared memory: one safetensors file per export, only the header over gRPC.

The sender (the Trainer) and the receiver (the Rollout) on one host are configured with the
same directory, by default `/dev/shm/opentinker-weights`. A writer keeps its files in a
directory of its own, `<root>/<owner>/<nonce>.safetensors` (owner "trainer-<pid>-<random>"):
it removes that directory on close, and the directories of dead processes when it opens, so a
crash leaks nothing past the next start. Directories are 0700 and files 0600: sender and
receiver run as one user.

The file is a plain safetensors file (anything can read it): the JSON index lists the tensors in
the header's spec order with contiguous data offsets, and its metadata carries the nonce. The
data section is therefore exactly the bytes a chunk stream would carry, and the header's
checksum (XXH3-64 over 8 MiB chunks, `ChunkedXXH3`) is the same for both transports. The writer
hashes each chunk in the hash pool while it writes that chunk; the receiver hashes the chunks of
its mapping in parallel (`hexdigest_of`).

The receiver trusts nothing in the name. It accepts only "<owner>/<file>.safetensors" with
letters, digits, '-' and '_', opens each component relative to the previous directory with
O_NOFOLLOW (no '..', no symbolic link anywhere below its root), wants a regular file of the
header's size whose metadata holds the header's nonce, checks the index against the header's
specs and the checksum over the data, and then deletes the file (it is read once). The tensors
it returns view a private mapping of the file: no copy in the receiver's memory, and the pages
go when the tensors do.
"""

from __future__ import annotations

import errno
import functools
import json
import mmap
import os
import re
import secrets
import shutil
import stat
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from opentinker_runtime.ml.errors import WeightsError
from opentinker_runtime.ml.weights import (DTYPE_BY_NAME, HASH_THREADS, ChecksumAlgorithm, PoolDigest, TensorSpec,
                                   WeightsChecksum, check_spec, chunk_digest, chunks_of, combine_digests,
                                   digest_in_pool, hexdigest_of, tensor_bytes, tensor_specs)

SUFFIX = ".safetensors"
NONCE_KEY = "opentinker_nonce"
SAFETENSORS_DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
_COMPONENT = r"[A-Za-z0-9_-]{1,80}"
NAME_PATTERN = re.compile(rf"({_COMPONENT})/({_COMPONENT}){re.escape(SUFFIX)}")
OWNER_PATTERN = re.compile(r"[a-z]+-(\d+)-[0-9a-f]+")
MAX_INDEX_BYTES = 64 << 20
IOV_MAX = 1024


class SharedFileUnavailable(WeightsError):
    """The named file cannot be used here (not on this host, gone, another size or nonce):
    the sender should stream the weights instead."""


class SharedFileNotAllowed(WeightsError):
    """The name points outside the receiver's shared-memory directory (or at something that is
    not a plain file there)."""


@dataclass(frozen=True, kw_only=True)
class SharedFile:
    """Twin of common.v1.SharedWeightsFile."""

    name: str
    size_bytes: int
    nonce: str


@dataclass(frozen=True, kw_only=True)
class WrittenWeights:
    """What a writer wrote: the file, the specs in file order and the checksum of the data."""

    file: SharedFile
    specs: list[TensorSpec]
    checksum: WeightsChecksum


# ---- sender ------------------------------------------------------------------------------------

class SharedWeightsWriter:
    """Writes export files under `root/<owner>/`; `open()` before the first write, `close()` at
    the end. Thread-safe enough for one write per session at a time (names never collide)."""

    def __init__(self, root: Path, *, role: str = "trainer") -> None:
        self.root = Path(root)
        self.owner = f"{role}-{os.getpid()}-{secrets.token_hex(4)}"
        self.directory = self.root / self.owner

    def open(self) -> None:
        """Create the directories; remove those of writers whose process is gone."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        remove_dead_owners(self.root)
        self.directory.mkdir(mode=0o700, exist_ok=True)

    def write(self, state_dict: Mapping[str, torch.Tensor]) -> WrittenWeights:
        """One file holding `state_dict` (OSError, e.g. ENOSPC, leaves no file behind)."""
        nonce = secrets.token_hex(16)
        specs = tensor_specs(state_dict)
        index = safetensors_index(specs, nonce)
        path = self.directory / f"{nonce}{SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, index)
            hex_digest = _write_tensors(fd, len(index), state_dict.values())
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(fd)
        size = len(index) + sum(spec.byte_length for spec in specs)
        checksum = WeightsChecksum(algorithm=ChecksumAlgorithm.XXH3_64_CHUNKED, hex_digest=hex_digest)
        return WrittenWeights(file=SharedFile(name=f"{self.owner}/{path.name}", size_bytes=size, nonce=nonce),
                              specs=specs, checksum=checksum)

    def remove(self, name: str) -> None:
        """Delete one of this writer's files (gone already is fine)."""
        owner, _, filename = name.partition("/")
        if owner == self.owner and NAME_PATTERN.fullmatch(name):
            (self.directory / filename).unlink(missing_ok=True)

    def remove_older_than(self, age_s: float) -> list[str]:
        """Delete this writer's files older than `age_s`; their names."""
        cutoff, removed = time.time() - age_s, []
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                if path.stat(follow_symlinks=False).st_mtime < cutoff:
                    path.unlink(missing_ok=True)
                    removed.append(f"{self.owner}/{path.name}")
            except FileNotFoundError:
                continue
        return removed

    def files(self) -> list[str]:
        return sorted(f"{self.owner}/{path.name}" for path in self.directory.glob(f"*{SUFFIX}"))

    def close(self) -> None:
        """Remove this writer's directory and every file in it."""
        shutil.rmtree(self.directory, ignore_errors=True)


def _write_tensors(fd: int, offset: int, tensors: Iterable[torch.Tensor]) -> str:
    """The tensors' bytes from `offset` on, one checksum chunk (8 MiB) per vectored write; their
    XXH3_64_CHUNKED hex digest. A chunk that another follows is offered to the hash pool, which
    hashes it while this thread writes it (both read it from the source, in cache; chunks no pool
    thread got to are hashed here at the end); the last one (a LoRA adapter's only one) is hashed
    here, then written: waiting for another thread would cost more than its hash. A vectored
    write puts many small tensors in one system call (a LoRA adapter is many small tensors; a
    system call each would cost more than their bytes, more so in a sandbox such as gVisor)."""
    digests: list[PoolDigest | bytes] = []
    chunks = chunks_of(tensor_bytes(tensor) for tensor in tensors)
    chunk = next(chunks, None)
    while chunk is not None:
        following = next(chunks, None)
        digests.append(digest_in_pool(chunk) if following is not None and HASH_THREADS > 1
                       else chunk_digest(chunk))
        _pwrite_all(fd, chunk, offset)
        offset += sum(len(piece) for piece in chunk)
        chunk = following
    return combine_digests(d if isinstance(d, bytes) else d.digest() for d in digests)


def _pwrite_all(fd: int, pieces: list[memoryview], offset: int) -> None:
    pieces = [piece for piece in pieces if len(piece)]
    while pieces:
        written = os.pwritev(fd, pieces[:IOV_MAX], offset)
        if written <= 0:
            raise OSError(errno.EIO, "a write to the shared-memory file made no progress")
        offset += written
        while pieces and written >= len(pieces[0]):
            written -= len(pieces[0])
            pieces.pop(0)
        if written:
            pieces[0] = pieces[0][written:]


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view)
        view = view[written:]


def safetensors_index(specs: Sequence[TensorSpec], nonce: str) -> bytes:
    """The safetensors prefix: u64 length, then the JSON index padded with spaces to 8 bytes.
    The tensors' entries are remembered per list of specs (an export's layout rarely changes)."""
    metadata = json.dumps({"__metadata__": {NONCE_KEY: nonce}}, separators=(",", ":")).encode()
    entries = _index_entries(tuple(specs))
    text = metadata[:-1] + (b"," + entries[1:] if len(entries) > 2 else b"}")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


@functools.lru_cache(maxsize=32)
def _index_entries(specs: tuple[TensorSpec, ...]) -> bytes:
    """The JSON object of the tensors' index entries, in order, data offsets contiguous."""
    entries: dict[str, object] = {}
    offset = 0
    for spec in specs:
        entries[spec.name] = {"dtype": SAFETENSORS_DTYPES[spec.dtype], "shape": list(spec.shape),
                              "data_offsets": [offset, offset + spec.byte_length]}
        offset += spec.byte_length
    return json.dumps(entries, separators=(",", ":")).encode()


def remove_dead_owners(root: Path) -> list[str]:
    """Delete the writer directories under `root` whose process no longer runs; their names."""
    removed = []
    for entry in Path(root).iterdir():
        match = OWNER_PATTERN.fullmatch(entry.name)
        if match and entry.is_dir() and not entry.is_symlink() and not _process_alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- receiver ----------------------------------------------------------------------------------

def read_shared_weights(root: Path, shared: SharedFile, specs: Sequence[TensorSpec],
                        checksum: WeightsChecksum) -> dict[str, torch.Tensor]:
    """The tensors of the file `shared` names under `root`, checked against the header's specs
    and checksum; the file is deleted once it proved to be the header's (even when corrupt).

    SharedFileNotAllowed: a name outside `root`; SharedFileUnavailable: not usable here (send
    the stream); WeightsError: the file is the header's but its contents are not.
    """
    match = NAME_PATTERN.fullmatch(shared.name)
    if match is None:
        raise SharedFileNotAllowed(
            f"shared_file.name {shared.name!r} is not '<owner>/<file>{SUFFIX}' of letters, digits, "
            "'-' and '_' under the shared-memory directory")
    owner, filename = match.group(1), f"{match.group(2)}{SUFFIX}"
    _check_specs(tuple(specs))
    with _Opened(Path(root), owner, filename) as opened:
        size = os.fstat(opened.fd).st_size
        if size != shared.size_bytes:
            raise SharedFileUnavailable(
                f"shared_file {shared.name!r} is {size} bytes here, the header says {shared.size_bytes} "
                "(truncated, or another host's file)")
        mapping = _map_private(opened.fd, size)
        data_start = _check_index(mapping, shared, specs)
        opened.unlink()  # it is the header's file: read once, whatever its contents
        _check_checksum(mapping, data_start, checksum)
        return _tensors(mapping, data_start, specs)


@functools.lru_cache(maxsize=32)
def _check_specs(specs: tuple[TensorSpec, ...]) -> None:
    """`check_spec` of each (remembered: an export's layout rarely changes)."""
    for spec in specs:
        check_spec(spec)


class _Opened:
    """The file `root/owner/filename`, opened without following any link below `root`."""

    def __init__(self, root: Path, owner: str, filename: str) -> None:
        self.root, self.owner, self.filename = root, owner, filename
        self.fds: list[int] = []
        self.fd = -1

    def __enter__(self) -> _Opened:
        try:
            self.fds.append(os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            self.fds.append(os.open(self.owner, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                    dir_fd=self.fds[0]))
            self.fd = os.open(self.filename, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                              dir_fd=self.fds[1])
            self.fds.append(self.fd)
        except BaseException as error:
            self.__exit__()
            raise _open_error(error, f"{self.owner}/{self.filename}", self.root) from error
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            self.__exit__()
            raise SharedFileNotAllowed(f"shared_file {self.owner}/{self.filename!r} is not a regular file")
        return self

    def unlink(self) -> None:
        try:
            os.unlink(self.filename, dir_fd=self.fds[1])
        except OSError:
            pass  # the writer's own cleanup removes it

    def __exit__(self, *_exc: object) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def _map_private(fd: int, size: int) -> mmap.mmap:
    """A copy-on-write mapping: writable, as torch.frombuffer wants (a write copies that page and
    never reaches the file). Not MAP_POPULATE: on a writable private mapping it copies every page;
    madvise(MADV_POPULATE_READ) measured slower than faulting the pages in while hashing."""
    if size == 0:
        raise SharedFileUnavailable("the shared file is empty")
    return mmap.mmap(fd, size, access=mmap.ACCESS_COPY)


def _open_error(error: BaseException, name: str, root: Path) -> Exception:
    if isinstance(error, OSError) and error.errno in (errno.ELOOP, errno.ENOTDIR):
        return SharedFileNotAllowed(f"shared_file {name!r}: a symbolic link or non-directory on the "
                                    f"way, refused (only plain files under {root} are read)")
    if isinstance(error, FileNotFoundError):
        return SharedFileUnavailable(f"shared_file {name!r} does not exist under {root} on this host "
                                     "(the sender is on another host, or the file was removed)")
    if isinstance(error, OSError):
        return SharedFileUnavailable(f"shared_file {name!r} under {root} cannot be opened: {error.strerror}")
    return WeightsError(f"shared_file {name!r}: {error}")


def _check_index(mapping: mmap.mmap, shared: SharedFile, specs: Sequence[TensorSpec]) -> int:
    """The data section's start; SharedFileUnavailable for another nonce, WeightsError when the
    index does not list exactly the header's tensors at contiguous offsets. An index byte for
    byte what `safetensors_index` writes for the header is checked without parsing it."""
    expected_index = safetensors_index(specs, shared.nonce)
    if mapping[:len(expected_index)] == expected_index:
        data_bytes = sum(spec.byte_length for spec in specs)
        if len(expected_index) + data_bytes != len(mapping):
            raise WeightsError(f"shared_file {shared.name!r}: {len(mapping) - len(expected_index)} data "
                               f"bytes, the header's tensors are {data_bytes}")
        return len(expected_index)
    return _parse_index(mapping, shared, specs)


def _parse_index(mapping: mmap.mmap, shared: SharedFile, specs: Sequence[TensorSpec]) -> int:
    """`_check_index` of an index written some other way (another writer's JSON)."""
    if len(mapping) < 8:
        raise SharedFileUnavailable(f"shared_file {shared.name!r} is too short to be a safetensors file")
    (index_bytes,) = struct.unpack_from("<Q", mapping, 0)
    if index_bytes > min(len(mapping) - 8, MAX_INDEX_BYTES):
        raise SharedFileUnavailable(f"shared_file {shared.name!r} has no valid safetensors index")
    try:
        index = json.loads(mapping[8:8 + index_bytes])
        nonce = index.pop("__metadata__", {}).get(NONCE_KEY)
    except (ValueError, AttributeError) as error:
        raise SharedFileUnavailable(f"shared_file {shared.name!r} has no valid safetensors index") from error
    if nonce != shared.nonce:
        raise SharedFileUnavailable(f"shared_file {shared.name!r} is another export (nonce differs)")
    expected, offset = {}, 0
    for spec in specs:
        expected[spec.name] = {"dtype": SAFETENSORS_DTYPES[spec.dtype], "shape": list(spec.shape),
                               "data_offsets": [offset, offset + spec.byte_length]}
        offset += spec.byte_length
    if index != expected:
        differ = sorted(name for name in set(index) | set(expected) if index.get(name) != expected.get(name))
        raise WeightsError(f"shared_file {shared.name!r}: its index differs from the header's tensors "
                           f"({', '.join(differ[:5])})")
    if 8 + index_bytes + offset != len(mapping):
        raise WeightsError(f"shared_file {shared.name!r}: {len(mapping) - 8 - index_bytes} data bytes, "
                           f"the header's tensors are {offset}")
    return 8 + index_bytes


def _check_checksum(mapping: mmap.mmap, data_start: int, checksum: WeightsChecksum) -> None:
    """The data section's checksum, chunks in parallel (their threads fault the pages in too)."""
    with memoryview(mapping) as whole, whole[data_start:] as data:
        digest = hexdigest_of([data], checksum.algorithm)
    if digest != checksum.hex_digest:
        raise WeightsError(f"{checksum.algorithm} mismatch: header {checksum.hex_digest}, "
                           f"shared file {digest}")


def _tensors(mapping: mmap.mmap, data_start: int, specs: Sequence[TensorSpec]) -> dict[str, torch.Tensor]:
    """Tensors viewing the mapping: tensors of one dtype are split from one flat view (one call
    instead of one per tensor, which costs more than a LoRA adapter's small tensors)."""
    dtypes = {spec.dtype for spec in specs}
    dtype = DTYPE_BY_NAME[dtypes.pop()] if len(dtypes) == 1 else None
    if dtype is None or data_start % dtype.itemsize or not any(spec.byte_length for spec in specs):
        return _tensors_one_by_one(mapping, data_start, specs)
    numels = [spec.byte_length // dtype.itemsize for spec in specs]
    flat = torch.frombuffer(mapping, dtype=dtype, count=sum(numels), offset=data_start)
    return {spec.name: part.view(*spec.shape) if spec.shape else part.view(())  # *shape: ~1 us less
            for spec, part in zip(specs, flat.split(numels))}


def _tensors_one_by_one(mapping: mmap.mmap, data_start: int,
                        specs: Sequence[TensorSpec]) -> dict[str, torch.Tensor]:
    tensors, offset = {}, data_start
    for spec in specs:
        dtype = DTYPE_BY_NAME[spec.dtype]
        if spec.byte_length == 0:
            tensors[spec.name] = torch.empty(spec.shape, dtype=dtype)
        else:
            flat = torch.frombuffer(mapping, dtype=dtype, count=spec.byte_length // dtype.itemsize, offset=offset)
            tensors[spec.name] = flat.reshape(spec.shape)
        offset += spec.byte_length
    return tensors
