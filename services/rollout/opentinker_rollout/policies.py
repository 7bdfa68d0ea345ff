"""Loaded policies keyed by policy_id: load, unload, and atomic weight updates.

A policy is a model (optionally with a LoRA adapter so adapter weights can be loaded later),
its engine, its batcher and its chat renderer. LoRA policies of the same model source share
one `ModelBase`: one copy of the base weights, one engine and one batcher, each policy its
own named adapter (resident side by side), so requests of several jobs batch together and
each row runs its own adapter. A full-weights policy has a base of its own (its updates
replace the base). Unloading a LoRA policy deletes its adapter; the base goes with the last
policy on it. `policy_version` starts at 0 (the base weights) and only grows: UpdateWeights
with a version <= the current one is refused with WEIGHTS_VERSION_CONFLICT.

Weight sync does not stall generation. New weights are received, assembled and verified
(sizes, sha256, names and shapes) while the policy keeps generating on its current ones;
nothing is touched until they pass. They are then applied between two decode steps
(`GenerationBatcher.between_steps`: the step in progress ends, no row is drained), and the
version changes at that same moment, so no step ever sees half-updated weights and no request
waits for the longest generation in flight. A generation in flight at a swap has its first
tokens from the old weights and its later ones from the new weights (reading the KV cache the
old ones wrote); each token's sampling logprob is that of the weights that sampled it, and the
generation reports the version it was admitted under, the older one (the conservative one for
staleness). A LoRA update copies into its own adapter only: the other policies on the base keep
their weights, their versions and their rows. Adding or deleting an adapter still waits until
no row is in flight (`exclusive()`).

No policy outlives its attempt: loading a policy for a job's newer attempt (higher fencing token),
or the Scheduler assigning one here (`attempt_assigned`), unloads the policies the job's earlier
attempts loaded; a job the Scheduler stopped or moved away (`job_stopped`) loses its policies; and
`reap_idle` unloads policies not used (no call, no generation) for `idle_ttl_s`, except those of
an attempt assigned this worker. A later call on an unloaded policy is NotFound saying why.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

import structlog
import torch

from opentinker_runtime.ml.errors import MLError, WeightsError
from opentinker_runtime.ml.models import add_lora_adapter, apply_lora, load_model
from opentinker_runtime.ml.sources import LoraSpec, ModelInfo, ModelSource
from opentinker_runtime.ml.shared_weights import SharedFile, SharedFileNotAllowed, SharedFileUnavailable, read_shared_weights
from opentinker_runtime.ml.weights import (ChecksumAlgorithm, TensorSpec, WeightsAssembler, WeightsChecksum, load_lora_state_dict,
                                   lora_state_dict)
from opentinker_rollout.metrics import count_weight_update
from opentinker_rollout.batcher import BatchedGeneration, GenerationBatcher, WholeBatchEngine
from opentinker_rollout.engine import GenerationRequest
from opentinker_rollout.engine_thread import run_in_engine_thread
from opentinker_rollout.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    WeightsCorrupt,
    WeightsVersionConflict,
)
from opentinker_runtime.edge.lease import FencingGuard, LeaseContext
from opentinker_runtime.workers.devices import ResidentModel, group_resident
from opentinker_rollout.rendering import TokenizerRenderer
from opentinker_rollout.transformers_engine import TransformersEngine

log = structlog.get_logger(__name__)
DEFAULT_IDLE_TTL_S = 1800.0
REMEMBERED_UNLOADS = 1024


class WeightsFormat(StrEnum):
    LORA_ADAPTER = "lora_adapter"
    FULL = "full"


@dataclass(frozen=True, kw_only=True)
class LoadRequest:
    request_id: str = ""
    lease: LeaseContext = LeaseContext()
    source: ModelSource
    lora: LoraSpec | None = None
    """Wrap the model with this (zero-initialised) adapter; later updates fill it."""
    max_batch_size: int = 0
    """0 = the registry default."""


@dataclass(frozen=True, kw_only=True)
class PolicyInfo:
    policy_id: str
    job_id: str
    model_info: ModelInfo
    policy_version: int


@dataclass(frozen=True, kw_only=True)
class WeightsHeader:
    """What a weight transfer announces before its chunks."""

    format: WeightsFormat
    policy_version: int
    tensors: tuple[TensorSpec, ...]
    total_bytes: int
    checksum: WeightsChecksum | None = None
    sha256: str = ""
    """An older sender's checksum, when `checksum` is None."""
    shared_file: SharedFile | None = None
    """Set when the tensors wait in a shared-memory file (no chunks follow)."""

    @property
    def expected_checksum(self) -> WeightsChecksum:
        return self.checksum or WeightsChecksum(algorithm=ChecksumAlgorithm.SHA256, hex_digest=self.sha256)


@dataclass(frozen=True, kw_only=True)
class WeightsChunk:
    tensor_name: str
    offset: int
    data: bytes


@dataclass(kw_only=True)
class ModelBase:
    """A loaded model and what generates with it, shared by the LoRA policies on it."""

    source: ModelSource
    model: torch.nn.Module
    engine: TransformersEngine
    batcher: GenerationBatcher
    renderer: TokenizerRenderer
    model_info: ModelInfo
    adapters: set[str] = field(default_factory=set)
    """Adapter names of the LoRA policies on this base."""


@dataclass(frozen=True, kw_only=True)
class AdapterGenerator:
    """The agent loop's Generator for one policy: its requests name the policy's adapter."""

    batcher: GenerationBatcher
    adapter: str
    touch: Callable[[], None] = lambda: None
    """Called at every generation (the policy is in use)."""

    async def generate(self, request: GenerationRequest) -> BatchedGeneration:
        self.touch()
        return await self.batcher.generate(replace(request, adapter=self.adapter))


@dataclass(kw_only=True)
class LoadedPolicy:
    policy_id: str
    job_id: str
    base: ModelBase
    lora: LoraSpec | None
    adapter: str = ""
    """This policy's adapter on the base ("" = the base model itself, full weights)."""
    fencing_token: int = 0
    """The fencing token of the attempt that loaded it."""
    last_used: float = field(default_factory=time.monotonic)

    @property
    def model(self) -> torch.nn.Module:
        return self.base.model

    @property
    def engine(self) -> TransformersEngine:
        return self.base.engine

    @property
    def batcher(self) -> GenerationBatcher:
        return self.base.batcher

    @property
    def renderer(self) -> TokenizerRenderer:
        return self.base.renderer

    @property
    def model_info(self) -> ModelInfo:
        return self.base.model_info

    @property
    def generator(self) -> AdapterGenerator:
        return AdapterGenerator(batcher=self.base.batcher, adapter=self.adapter, touch=self.touch)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    @property
    def version(self) -> int:
        return self.base.batcher.version(self.adapter)

    def info(self) -> PolicyInfo:
        return PolicyInfo(policy_id=self.policy_id, job_id=self.job_id,
                          model_info=self.model_info, policy_version=self.version)


class PolicyRegistry:
    """The policies this worker serves, and the fencing tokens it has seen."""

    def __init__(self, *, checkpoint_root: Path, default_max_batch_size: int = 32,
                 gather_window_s: float = 0.002, continuous_batching: bool = True,
                 idle_ttl_s: float = DEFAULT_IDLE_TTL_S, shared_weights_dir: Path | None = None,
                 device_ids: tuple[str, ...] = ("cpu:0",)) -> None:
        self.checkpoint_root = checkpoint_root
        self.device_ids = device_ids
        """The devices the worker offers the Scheduler (`resident_models`)."""
        self.shared_weights_dir = shared_weights_dir
        """Where a header's shared file may be read from; None = refuse shared files."""
        self.continuous_batching = continuous_batching
        self.default_max_batch_size = default_max_batch_size
        self.gather_window_s = gather_window_s
        self.fencing = FencingGuard(worker="rollout worker")
        self._policies: dict[str, LoadedPolicy] = {}
        self._lora_bases: dict[ModelSource, ModelBase] = {}
        self._by_request: dict[str, tuple[LoadRequest, str]] = {}
        self._load_lock = asyncio.Lock()
        self.idle_ttl_s = idle_ttl_s
        self._unloaded: OrderedDict[str, str] = OrderedDict()
        """Why a policy was unloaded, for the NotFound of a late call."""

    def get(self, policy_id: str) -> LoadedPolicy:
        if not policy_id:
            raise InvalidArgument("policy_id", "is required")
        policy = self._policies.get(policy_id)
        if policy is None:
            why = self._unloaded.get(policy_id)
            raise NotFound(f"policy_id: no policy {policy_id!r} is loaded on this worker"
                           + (f"; it was unloaded because {why}" if why else ""))
        policy.touch()
        return policy

    def check_lease(self, policy: LoadedPolicy, lease: LeaseContext) -> None:
        """Fencing, and a job may only drive its own policy."""
        self.fencing.check(lease)
        if policy.job_id and lease.job_id and lease.job_id != policy.job_id:
            raise FailedPrecondition(f"lease.job_id: policy {policy.policy_id!r} belongs to job "
                                     f"{policy.job_id!r}, not {lease.job_id!r}")

    async def load(self, request: LoadRequest) -> PolicyInfo:
        """Load a policy (idempotent per request_id); the job's earlier attempts' policies are
        unloaded first."""
        self.fencing.check(request.lease)
        await self.unload_older_attempts(request.lease.job_id, request.lease.fencing_token)
        async with self._load_lock:
            existing = self._replay(request)
            if existing is not None:
                return existing.info()
            policy = await self._new_policy(request)
            self._policies[policy.policy_id] = policy
            if request.request_id:
                self._by_request[request.request_id] = (request, policy.policy_id)
        log.info("policy_loaded", policy_id=policy.policy_id, job_id=policy.job_id,
                 source=request.source.to_dict(), lora=request.lora is not None,
                 adapters_on_base=len(policy.base.adapters))
        return policy.info()

    async def unload(self, policy_id: str, lease: LeaseContext) -> PolicyInfo:
        policy = self.get(policy_id)
        self.check_lease(policy, lease)
        info = policy.info()
        await self._release(policy, "its job unloaded it (UnloadModel)")
        return info

    async def unload_older_attempts(self, job_id: str, fencing_token: int) -> list[str]:
        """Unload the policies of `job_id` loaded by an attempt older than `fencing_token`."""
        stale = [p for p in self._policies.values()
                 if job_id and p.job_id == job_id and p.fencing_token < fencing_token]
        for policy in stale:
            await self._release(policy, f"a newer attempt of job {job_id!r} (fencing token "
                                        f"{fencing_token}) replaced the one that loaded it "
                                        f"(fencing token {policy.fencing_token})")
        return [policy.policy_id for policy in stale]

    async def attempt_assigned(self, job_id: str, fencing_token: int) -> None:
        """The Scheduler assigned this worker an attempt of `job_id`: its token becomes the job's
        floor, and older attempts' policies are unloaded."""
        if not job_id:
            return
        self.fencing.attempt_assigned(job_id, fencing_token)
        await self.unload_older_attempts(job_id, fencing_token)

    async def job_stopped(self, job_id: str) -> list[str]:
        """The Scheduler no longer runs `job_id` here (cancelled, ended, or moved to another
        worker): unload its policies."""
        self.fencing.job_stopped(job_id)
        ended = [p for p in self._policies.values() if job_id and p.job_id == job_id]
        for policy in ended:
            await self._release(policy, f"the scheduler no longer runs job {job_id!r} on this worker")
        return [policy.policy_id for policy in ended]

    async def reap_idle(self) -> list[str]:
        """Unload policies unused for `idle_ttl_s` (except an assigned attempt's); their ids."""
        cutoff = time.monotonic() - self.idle_ttl_s
        idle = [p for p in self._policies.values() if p.last_used < cutoff and not self._lease_holds(p)]
        for policy in idle:
            await self._release(policy, f"it was not used for {self.idle_ttl_s:g} s (the rollout's "
                                        "policy_idle_ttl_seconds)")
        return [policy.policy_id for policy in idle]

    def _lease_holds(self, policy: LoadedPolicy) -> bool:
        return self.fencing.holds(policy.job_id, policy.fencing_token)

    async def _release(self, policy: LoadedPolicy, why: str) -> None:
        """Drop `policy` (its adapter, or its base with the last policy on it), remembering why."""
        policy_id = policy.policy_id
        async with self._load_lock:  # a load must not add an adapter to a base being closed
            if self._policies.pop(policy_id, None) is None:
                return  # released meanwhile
            self._unloaded[policy_id] = why
            while len(self._unloaded) > REMEMBERED_UNLOADS:
                self._unloaded.popitem(last=False)
            base = policy.base
            base.adapters.discard(policy.adapter)
            if base.adapters:
                async with base.batcher.exclusive():
                    base.batcher.close_adapter(policy.adapter)
                    await run_in_engine_thread(_delete_adapter, base.model, policy.adapter)
            else:
                if self._lora_bases.get(base.source) is base:
                    del self._lora_bases[base.source]
                await base.batcher.close()
        log.info("policy_unloaded", policy_id=policy_id, job_id=policy.job_id[:128], why=why,
                 adapters_left_on_base=len(base.adapters))

    async def close(self) -> None:
        for base in {id(p.base): p.base for p in self._policies.values()}.values():
            await base.batcher.close()
        self._policies.clear()
        self._lora_bases.clear()

    def resident_models(self) -> list[ResidentModel]:
        """The LoRA policies' shared bases held now, each with the jobs whose adapters are on it:
        on every device the worker offers (its models live in the process's memory, where a job
        on any of its slots shares them)."""
        return group_resident((device_id, policy.base.source.model_key, policy.job_id)
                              for policy in list(self._policies.values()) if policy.lora is not None
                              for device_id in self.device_ids)

    @property
    def base_count(self) -> int:
        """Distinct loaded models (LoRA policies of one source share one)."""
        return len({id(policy.base) for policy in self._policies.values()})

    async def update_weights(self, policy_id: str, lease: LeaseContext, header: WeightsHeader,
                             chunks: AsyncIterator[WeightsChunk]) -> tuple[PolicyInfo, int]:
        """Receive and verify new weights while generation goes on, then apply them between two
        decode steps; (the policy afterwards, bytes received)."""
        policy = self.get(policy_id)
        self.check_lease(policy, lease)
        _check_header(policy, header)
        # on the engine thread: it adds and deletes other policies' adapters on the same model
        expected = await run_in_engine_thread(_expected_shapes, policy, header.format)
        _check_shapes(expected, {spec.name: spec.shape for spec in header.tensors}, where="header.tensors")
        if header.shared_file is not None:
            state_dict, received = await self._read_shared(header, chunks)
        else:
            state_dict, received = await _assemble(header, chunks)
        _check_shapes(expected, {name: tuple(tensor.shape) for name, tensor in state_dict.items()})
        verified = time.perf_counter()
        async with policy.batcher.between_steps():
            _check_version(policy, header.policy_version)
            await run_in_engine_thread(_apply, policy, header.format, state_dict)
            policy.batcher.versions[policy.adapter] = header.policy_version
        count_weight_update(header.format.value, received)
        log.info("weights_updated", policy_id=policy_id, version=policy.version, bytes=received,
                 transport="shared_memory" if header.shared_file else "stream",
                 swap_s=round(time.perf_counter() - verified, 4),
                 rows_in_flight=policy.engine.running_rows)
        return policy.info(), received

    async def _read_shared(self, header: WeightsHeader,
                           chunks: AsyncIterator[WeightsChunk]) -> tuple[dict[str, torch.Tensor], int]:
        """The tensors of the header's shared file (views of its mapping: no copy here)."""
        if await anext(aiter(chunks), None) is not None:
            raise InvalidArgument("chunk", "no chunks may follow a header that names a shared_file")
        if self.shared_weights_dir is None:
            raise FailedPrecondition("header.shared_file: this Rollout reads no shared-memory files "
                                     "(its OPENTINKER_SHARED_WEIGHTS_DIR is empty); send the weights "
                                     "as a stream", reason="WEIGHTS_SHARED_FILE_UNAVAILABLE")
        try:
            state_dict = await asyncio.to_thread(read_shared_weights, self.shared_weights_dir,
                                                 header.shared_file, header.tensors, header.expected_checksum)
        except SharedFileNotAllowed as error:
            raise InvalidArgument("header.shared_file.name", str(error), reason="PATH_NOT_ALLOWED") from error
        except SharedFileUnavailable as error:
            raise FailedPrecondition(f"header.shared_file: {error}; send the weights as a stream",
                                     reason="WEIGHTS_SHARED_FILE_UNAVAILABLE") from error
        except WeightsError as error:
            raise WeightsCorrupt(str(error), field="header.shared_file") from error
        return state_dict, header.total_bytes

    def _replay(self, request: LoadRequest) -> LoadedPolicy | None:
        if not request.request_id or request.request_id not in self._by_request:
            return None
        earlier, policy_id = self._by_request[request.request_id]
        if earlier != request:
            raise InvalidArgument("request_id", f"{request.request_id!r} was used for a "
                                  "different LoadModel request", reason="REQUEST_ID_REUSED")
        return self._policies.get(policy_id)

    async def _new_policy(self, request: LoadRequest) -> LoadedPolicy:
        """A policy on a shared base (LoRA, same source) or on a freshly loaded model."""
        suffix = uuid.uuid4().hex[:12]
        adapter = f"policy_{suffix}" if request.lora else ""
        base = self._lora_bases.get(request.source) if request.lora else None
        if base is None:
            base = await run_in_engine_thread(self._build_base, request, adapter)
            if request.lora:
                self._lora_bases[request.source] = base
        else:
            async with base.batcher.exclusive():
                await run_in_engine_thread(_add_adapter, base.model, request.lora, adapter)
        if adapter:
            base.adapters.add(adapter)
        return LoadedPolicy(policy_id=f"{request.lease.job_id or 'policy'}-{suffix}",
                            job_id=request.lease.job_id, base=base, lora=request.lora, adapter=adapter,
                            fencing_token=request.lease.fencing_token)

    def _build_base(self, request: LoadRequest, adapter: str) -> ModelBase:
        try:
            loaded = load_model(request.source, self.checkpoint_root)
            model = apply_lora(loaded.model, request.lora, adapter_name=adapter) if request.lora \
                else loaded.model
        except MLError as error:
            raise InvalidArgument("model", str(error)) from error
        model.eval()
        engine = TransformersEngine(model, loaded.tokenizer,
                                    max_context_length=loaded.info.max_context_length)
        batcher = GenerationBatcher(
            engine if self.continuous_batching else WholeBatchEngine(engine),
            max_batch_size=request.max_batch_size or self.default_max_batch_size,
            gather_window_s=self.gather_window_s)
        return ModelBase(source=request.source, model=model, engine=engine, batcher=batcher,
                         renderer=TokenizerRenderer(loaded.tokenizer),
                         model_info=_info(loaded.info, engine))


def _delete_adapter(model: torch.nn.Module, adapter: str) -> None:
    """Drop an adapter; peft's warning that another adapter became active says nothing here
    (every request names its adapter)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model.delete_adapter(adapter)


def _add_adapter(model: torch.nn.Module, spec: LoraSpec, adapter: str) -> None:
    try:
        add_lora_adapter(model, spec, adapter)
    except MLError as error:
        raise InvalidArgument("adaptation.lora", str(error)) from error
    model.eval()


def _info(info: ModelInfo, engine: TransformersEngine) -> ModelInfo:
    stops = tuple(dict.fromkeys((*info.stop_token_ids, *engine.eos_token_ids)))
    return ModelInfo(architecture=info.architecture, parameter_count=info.parameter_count,
                     trainable_parameter_count=info.trainable_parameter_count,
                     vocab_size=info.vocab_size, max_context_length=engine.max_context_length,
                     stop_token_ids=stops)


def _check_header(policy: LoadedPolicy, header: WeightsHeader) -> None:
    if header.format is WeightsFormat.LORA_ADAPTER and policy.lora is None:
        raise FailedPrecondition("header.format: LORA_ADAPTER weights need a policy loaded with "
                                 "a LoRA adaptation; load it with adaptation.lora set")
    if header.format is WeightsFormat.FULL and policy.lora is not None:
        raise FailedPrecondition("header.format: FULL weights cannot replace a LoRA policy's "
                                 "base; send LORA_ADAPTER weights")
    _check_version(policy, header.policy_version)


def _check_version(policy: LoadedPolicy, version: int) -> None:
    if version <= policy.version:
        raise WeightsVersionConflict(f"header.policy_version: {version} is not newer than the "
                                     f"policy's current version {policy.version}")


async def _assemble(header: WeightsHeader,
                    chunks: AsyncIterator[WeightsChunk]) -> tuple[dict[str, torch.Tensor], int]:
    received = 0
    try:
        assembler = WeightsAssembler(list(header.tensors), header.expected_checksum)
        async for chunk in chunks:
            assembler.add(chunk.tensor_name, chunk.offset, chunk.data)
            received += len(chunk.data)
        return assembler.finish(), received
    except WeightsError as error:
        raise WeightsCorrupt(str(error)) from error


def _expected_shapes(policy: LoadedPolicy, fmt: WeightsFormat) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor an update must bring. Run on the engine thread only: walking the
    model while it adds or deletes another policy's adapter fails ("dictionary changed size")."""
    tensors = lora_state_dict(policy.model, policy.adapter) if fmt is WeightsFormat.LORA_ADAPTER else policy.model.state_dict()
    return {name: tuple(tensor.shape) for name, tensor in tensors.items()}


def _check_shapes(expected: dict[str, tuple[int, ...]], received: dict[str, tuple[int, ...]], *,
                  where: str = "chunk") -> None:
    """Every expected tensor comes with its shape, and nothing else: checked on the header before
    anything is read (a bogus header allocates nothing) and on the tensors before applying."""
    unknown = sorted(set(received) - set(expected))
    missing = sorted(set(expected) - set(received))
    wrong = sorted(name for name in set(received) & set(expected)
                   if tuple(received[name]) != tuple(expected[name]))
    problems = [f"{label}: {', '.join(names[:5])}" for label, names in
                (("unknown tensors", unknown), ("missing tensors", missing),
                 ("wrong shapes", wrong)) if names]
    if problems:
        raise WeightsCorrupt("; ".join(problems), field=where)


def _apply(policy: LoadedPolicy, fmt: WeightsFormat, state_dict: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        if fmt is WeightsFormat.LORA_ADAPTER:
            load_lora_state_dict(policy.model, state_dict, policy.adapter)
        else:
            policy.model.load_state_dict(state_dict, strict=True)
