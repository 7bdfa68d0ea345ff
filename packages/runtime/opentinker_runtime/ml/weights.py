"""Weights as a byte stream: a package (tensor specs + checksum + chunks) and its assembler.

The sender (Trainer.ExportWeights) calls `state_dict_to_package`; the receiver
(Rollout.UpdateWeights) feeds each chunk to a `WeightsAssembler` and calls `finish()`.
Tensors travel as little-endian bytes in spec order; the checksum covers all tensor bytes in
that order: XXH3-64 over 8 MiB chunks from current senders (`ChunkedXXH3`: the chunks hash in
parallel), XXH3-64 in one pass or SHA-256 hex from earlier ones. It guards against corruption,
it does not authenticate. Dtype names are "float32",
"bfloat16", "float16". `opentinker_runtime.ml.shared_weights` carries the same bytes in one
shared-memory file instead of chunks.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import torch
import xxhash
from peft import get_peft_model_state_dict, set_peft_model_state_dict

from opentinker_runtime.ml.errors import WeightsError

DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024 - 64 * 1024
"""Below gRPC's default 4 MiB message limit, with room for the message's other fields."""
DTYPE_BY_NAME = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
NAME_BY_DTYPE = {dtype: name for name, dtype in DTYPE_BY_NAME.items()}


CHECKSUM_CHUNK_BYTES = 8 << 20
"""The chunk of XXH3_64_CHUNKED: part of the algorithm's definition (both ends must agree)."""
HASH_THREADS = max(1, min(2, os.cpu_count() or 1))
"""Threads that hash the chunks of one checksum (the calling thread and the pool's): two nearly
halve the receiver's check of a 123 MB file on a 2-core machine; more were not measured."""


class ChecksumAlgorithm(StrEnum):
    XXH3_64_CHUNKED = "xxh3_64_chunked"  # what senders compute (`ChunkedXXH3`)
    XXH3_64 = "xxh3_64"   # accepted from earlier senders: one pass over all bytes
    SHA256 = "sha256"     # accepted from older senders (the header's `sha256` field)


@dataclass(frozen=True, kw_only=True)
class WeightsChecksum:
    """A digest of all tensor bytes in spec order (twin of common.v1.WeightsChecksum)."""

    algorithm: ChecksumAlgorithm
    hex_digest: str


def new_hasher(algorithm: ChecksumAlgorithm) -> Any:
    """An incremental hasher (`update(bytes)`, `hexdigest()`) of `algorithm`."""
    if algorithm is ChecksumAlgorithm.XXH3_64_CHUNKED:
        return ChunkedXXH3()
    return xxhash.xxh3_64() if algorithm is ChecksumAlgorithm.XXH3_64 else hashlib.sha256()


class ChunkedXXH3:
    """XXH3_64_CHUNKED, fed incrementally: XXH3-64 (seed 0) of each CHECKSUM_CHUNK_BYTES chunk of
    the bytes (the last may be shorter; no bytes, no chunks), then XXH3-64 of the chunk digests
    concatenated in order, 8 bytes big-endian each. `hexdigest_of` computes the same in parallel."""

    def __init__(self) -> None:
        self._digests = bytearray()
        self._chunk = xxhash.xxh3_64()
        self._filled = 0

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while view:
            take = min(len(view), CHECKSUM_CHUNK_BYTES - self._filled)
            self._chunk.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == CHECKSUM_CHUNK_BYTES:
                self._digests += self._chunk.digest()
                self._chunk.reset()
                self._filled = 0

    def hexdigest(self) -> str:
        tail = self._chunk.digest() if self._filled else b""
        return combine_digests([bytes(self._digests) + tail])


def combine_digests(digests: Iterable[bytes]) -> str:
    """XXH3_64_CHUNKED's hex digest from its chunk digests in order (`chunk_digest`)."""
    return xxhash.xxh3_64_hexdigest(b"".join(digests))


def chunk_digest(pieces: Iterable[Any]) -> bytes:
    """XXH3-64 of one chunk given as consecutive pieces, canonical (big-endian) bytes. xxhash
    releases the GIL while it hashes, so chunks hash in parallel in threads."""
    hasher = xxhash.xxh3_64()
    for piece in pieces:
        hasher.update(piece)
    return hasher.digest()


def chunks_of(pieces: Iterable[Any], chunk_bytes: int = CHECKSUM_CHUNK_BYTES) -> Iterator[list[memoryview]]:
    """The bytes of consecutive `pieces` (buffers) cut at every `chunk_bytes` from their start:
    lists of views (no copy) whose lengths add up to `chunk_bytes`, the last one's maybe fewer."""
    chunk: list[memoryview] = []
    size = 0
    for piece in pieces:
        view = memoryview(piece).cast("B")
        while view:
            part = view[:chunk_bytes - size]
            chunk.append(part)
            size += len(part)
            view = view[len(part):]
            if size == chunk_bytes:
                yield chunk
                chunk, size = [], 0
    if chunk:
        yield chunk


def hexdigest_of(pieces: Iterable[Any], algorithm: ChecksumAlgorithm) -> str:
    """The checksum of consecutive buffers; XXH3_64_CHUNKED hashes every HASH_THREADS-th chunk
    here and offers the others to the hash pool (`digest_in_pool`)."""
    if algorithm is not ChecksumAlgorithm.XXH3_64_CHUNKED:
        hasher = new_hasher(algorithm)
        for piece in pieces:
            hasher.update(piece)
        return hasher.hexdigest()
    chunks = list(chunks_of(pieces))
    offered = {index: digest_in_pool(chunk) for index, chunk in enumerate(chunks)
               if index % HASH_THREADS and len(chunks) > 1}
    here = {index: chunk_digest(chunk) for index, chunk in enumerate(chunks) if index not in offered}
    return combine_digests(here[index] if index in here else offered[index].digest()
                           for index in range(len(chunks)))


def hash_pool() -> ThreadPoolExecutor:
    """The process's pool of HASH_THREADS - 1 threads (at least one) that hash chunks."""
    global _HASH_POOL
    with _HASH_POOL_LOCK:
        if _HASH_POOL is None:
            _HASH_POOL = ThreadPoolExecutor(max_workers=max(1, HASH_THREADS - 1),
                                            thread_name_prefix="weights-hash")
        return _HASH_POOL


def _forget_hash_pool() -> None:
    """In a forked child: the parent's pool threads do not exist here, start a new pool."""
    global _HASH_POOL, _HASH_POOL_LOCK
    _HASH_POOL, _HASH_POOL_LOCK = None, threading.Lock()


_HASH_POOL: ThreadPoolExecutor | None = None
_HASH_POOL_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_forget_hash_pool)


class PoolDigest:
    """One chunk's digest offered to the hash pool; `digest()` computes it in the calling thread
    when no pool thread has started it yet (a loaded machine: better than waiting for a core)."""

    def __init__(self, pieces: Sequence[Any]) -> None:
        self.pieces = pieces
        self.future: Future[bytes] = hash_pool().submit(chunk_digest, pieces)

    def digest(self) -> bytes:
        return chunk_digest(self.pieces) if self.future.cancel() else self.future.result()


def digest_in_pool(pieces: Sequence[Any]) -> PoolDigest:
    """`chunk_digest(pieces)` offered to the hash pool (the caller goes on, e.g. writing the same
    bytes, and asks for the digest at the end)."""
    return PoolDigest(pieces)


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


@dataclass(frozen=True)
class WeightsPackage:
    """What a sender streams: the header's specs and checksum, then `chunks`."""

    specs: list[TensorSpec]
    checksum: WeightsChecksum
    chunks: Iterator[Chunk]
    tensors: Mapping[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def total_bytes(self) -> int:
        return sum(spec.byte_length for spec in self.specs)

    @property
    def sha256(self) -> str:
        """The SHA-256 an older receiver checks (computed on demand: a full pass over the bytes)."""
        return checksum_of(self.tensors, ChecksumAlgorithm.SHA256).hex_digest


def checksum_of(state_dict: Mapping[str, torch.Tensor],
                algorithm: ChecksumAlgorithm = ChecksumAlgorithm.XXH3_64_CHUNKED) -> WeightsChecksum:
    """The checksum of the tensors' bytes in order."""
    return WeightsChecksum(algorithm=algorithm,
                           hex_digest=hexdigest_of((tensor_bytes(t) for t in state_dict.values()), algorithm))


def state_dict_to_package(state_dict: Mapping[str, torch.Tensor], *,
                          chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> WeightsPackage:
    """Specs, XXH3_64_CHUNKED checksum and a lazy chunk iterator (chunks of at most `chunk_bytes`).

    The tensors are read twice (checksum now, chunks later): do not change them in between.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    specs = tensor_specs(state_dict)
    return WeightsPackage(specs, checksum_of(state_dict), _chunks(state_dict, chunk_bytes), state_dict)


def tensor_specs(state_dict: Mapping[str, torch.Tensor]) -> list[TensorSpec]:
    """`tensor_spec` of each tensor, in order (remembered per layout: names, dtypes, shapes)."""
    layout = tuple((name, tensor.dtype, tensor.shape) for name, tensor in state_dict.items())
    return list(_specs_of_layout(layout))


@functools.lru_cache(maxsize=32)
def _specs_of_layout(layout: tuple[tuple[str, torch.dtype, torch.Size], ...]) -> tuple[TensorSpec, ...]:
    return tuple(_spec(name, dtype, shape) for name, dtype, shape in layout)


def tensor_spec(name: str, tensor: torch.Tensor) -> TensorSpec:
    return _spec(name, tensor.dtype, tensor.shape)


def _spec(name: str, dtype: torch.dtype, shape: torch.Size) -> TensorSpec:
    if dtype not in NAME_BY_DTYPE:
        raise WeightsError(f"tensor {name!r} has unsupported dtype {dtype}")
    return TensorSpec(name=name, dtype=NAME_BY_DTYPE[dtype], shape=tuple(shape),
                      byte_length=math.prod(shape) * dtype.itemsize)


def check_spec(spec: TensorSpec) -> None:
    """WeightsError unless the dtype is known and byte_length is what dtype and shape make."""
    if spec.dtype not in DTYPE_BY_NAME:
        raise WeightsError(f"tensor {spec.name!r} has unsupported dtype {spec.dtype!r}")
    if any(size < 0 for size in spec.shape):
        raise WeightsError(f"tensor {spec.name!r} has a negative size in shape {spec.shape}")
    expected = math.prod(spec.shape) * DTYPE_BY_NAME[spec.dtype].itemsize
    if spec.byte_length != expected:
        raise WeightsError(f"tensor {spec.name!r}: byte_length {spec.byte_length} but {spec.dtype} "
                           f"of shape {list(spec.shape)} is {expected} bytes")


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's little-endian bytes, flat: a view of its own memory when it is a dense,
    contiguous CPU tensor (no copy), else of a contiguous CPU copy. The view keeps the tensor
    alive. It is built with ctypes rather than numpy: ~2 us a tensor instead of ~13, which
    matters for a LoRA adapter's hundred-odd small tensors (5 MB write in ~2 ms)."""
    if not tensor.is_cpu or tensor.layout is not torch.strided or not tensor.is_contiguous():
        tensor = tensor.detach().to("cpu").contiguous()
    size = tensor.nbytes
    if size == 0:
        return memoryview(b"")
    memory = (ctypes.c_ubyte * size).from_address(tensor.data_ptr())
    memory.owner = tensor  # the memory lives as long as the view does
    return memoryview(memory).cast("B")


def _chunks(state_dict: Mapping[str, torch.Tensor], chunk_bytes: int) -> Iterator[Chunk]:
    for name, tensor in state_dict.items():
        data = tensor_bytes(tensor)
        for offset in range(0, max(len(data), 1), chunk_bytes):
            yield Chunk(name, offset, bytes(data[offset:offset + chunk_bytes]))


class WeightsAssembler:
    """Collects chunks of a package and rebuilds the state dict after checking it.

    `checksum` is a WeightsChecksum, or (older senders) a SHA-256 hex string. Chunks that follow
    the spec order are hashed as they arrive (no second pass); any other order is hashed at
    `finish()`. Each tensor's bytes land in one preallocated buffer, which the tensor then views.
    """

    def __init__(self, specs: Sequence[TensorSpec], checksum: WeightsChecksum | str) -> None:
        self.specs = list(specs)
        self.checksum = (checksum if isinstance(checksum, WeightsChecksum)
                         else WeightsChecksum(algorithm=ChecksumAlgorithm.SHA256, hex_digest=checksum))
        self._by_name = {spec.name: spec for spec in self.specs}
        if len(self._by_name) != len(self.specs):
            raise WeightsError("the header lists a tensor name more than once")
        for spec in self.specs:
            check_spec(spec)
        self._buffers = {spec.name: torch.empty(spec.byte_length, dtype=torch.uint8) for spec in self.specs}
        self._filled = dict.fromkeys(self._by_name, 0)
        self._hasher = new_hasher(self.checksum.algorithm)
        self._in_order = True
        self._cursor = 0  # index of the spec the in-order stream is filling

    def add(self, tensor_name: str, offset: int, data: bytes) -> None:
        """Store one chunk; WeightsError for an unknown tensor, a gap or an overflow."""
        spec = self._by_name.get(tensor_name)
        if spec is None:
            raise WeightsError(f"chunk for tensor {tensor_name!r} that the header does not list")
        filled = self._filled[tensor_name]
        if offset != filled:
            raise WeightsError(f"chunk of {tensor_name!r} at offset {offset}, expected {filled}")
        if offset + len(data) > spec.byte_length:
            raise WeightsError(f"chunks of {tensor_name!r} exceed its {spec.byte_length} bytes")
        if data:
            target = self._buffers[tensor_name][offset:offset + len(data)]
            memoryview(target.numpy())[:] = data
        self._filled[tensor_name] = offset + len(data)
        self._hash_in_order(tensor_name, data)

    def _hash_in_order(self, tensor_name: str, data: bytes) -> None:
        if not self._in_order or not data:
            return
        while self._cursor < len(self.specs) and self.specs[self._cursor].name != tensor_name \
                and self._filled[self.specs[self._cursor].name] == self.specs[self._cursor].byte_length:
            self._cursor += 1  # the tensors before this one are complete
        if self._cursor < len(self.specs) and self.specs[self._cursor].name == tensor_name:
            self._hasher.update(data)
        else:
            self._in_order = False

    def finish(self) -> dict[str, torch.Tensor]:
        """The state dict; WeightsError when a tensor is short or the checksum differs."""
        for spec in self.specs:
            received = self._filled[spec.name]
            if received != spec.byte_length:
                raise WeightsError(f"tensor {spec.name!r} got {received} of {spec.byte_length} bytes")
        if self._in_order:
            digest = self._hasher.hexdigest()
        else:
            digest = hexdigest_of((memoryview(self._buffers[spec.name].numpy()) for spec in self.specs),
                                  self.checksum.algorithm)
        if digest != self.checksum.hex_digest:
            raise WeightsError(f"{self.checksum.algorithm} mismatch: header {self.checksum.hex_digest}, "
                               f"received {digest}")
        return {spec.name: self._buffers[spec.name].view(DTYPE_BY_NAME[spec.dtype]).reshape(spec.shape)
                for spec in self.specs}


def lora_state_dict(model: Any, adapter_name: str = "default") -> dict[str, torch.Tensor]:
    """The tensors of one adapter of a peft model (names without the adapter name).

    peft's `get_peft_model_state_dict` builds the whole model's state dict each time (tens of ms,
    more than moving a small adapter): the first call per (model, adapter) remembers which
    parameter each name is (weakly), later calls take those parameters, after checking that the
    model still holds the first and the last of them (deleting an adapter, or adding it anew,
    replaces them all).
    """
    cached = _ADAPTER_PARAMETERS.setdefault(model, {}).get(adapter_name)
    if cached:
        tensors = {name: ref() for name, _, ref in cached}
        if all(t is not None for t in tensors.values()) and all(
                _holds(model, full, ref) for _, full, ref in (cached[0], cached[-1])):
            return {name: t.detach() for name, t in tensors.items()}  # type: ignore[union-attr]
    state = dict(get_peft_model_state_dict(model, adapter_name=adapter_name))
    _ADAPTER_PARAMETERS[model][adapter_name] = _parameters_of(model, state)
    return state


_ADAPTER_PARAMETERS: weakref.WeakKeyDictionary[Any, dict[str, list[tuple[str, str, weakref.ref]] | None]] = \
    weakref.WeakKeyDictionary()
"""model -> adapter -> [(state-dict name, parameter name, weak parameter)], or None when not every
tensor is a parameter (then peft is asked every time). Weak: no tensor is kept alive."""


def _holds(model: Any, full_name: str, ref: weakref.ref) -> bool:
    """Whether `model` holds the parameter at `full_name` (the path walked through the modules'
    own tables: `get_parameter`'s attribute lookups cost ~50 us a name)."""
    *path, leaf = full_name.split(".")
    module = model
    try:
        for atom in path:
            module = module._modules[atom]
        return module._parameters.get(leaf) is ref()
    except (KeyError, AttributeError):
        return False


def _parameters_of(model: Any, state: Mapping[str, torch.Tensor]) -> list[tuple[str, str, weakref.ref]] | None:
    by_storage = {(p.data_ptr(), tuple(p.shape), p.dtype): (name, p) for name, p in model.named_parameters()}
    found = [(name, by_storage.get((t.data_ptr(), tuple(t.shape), t.dtype))) for name, t in state.items()]
    if not found or any(match is None for _, match in found):
        return None
    return [(name, full, weakref.ref(parameter)) for name, (full, parameter) in found]  # type: ignore[misc]


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
