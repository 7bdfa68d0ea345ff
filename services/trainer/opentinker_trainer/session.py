"""A training session: one policy (full or LoRA), its AdamW state, its reference policy, and
the counters the API reports. Methods are synchronous torch code; callers serialise them per
session (the registry's lock) and run them off the event loop. Build one with
`session_factory.create_session` (one rank: `session_loading.load_rank_session`).
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import hashlib
import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from opentinker_runtime.ml.logprobs import token_logprobs
from opentinker_runtime.ml.models import describe_model
from opentinker_runtime.ml.sources import LoraSpec, ModelInfo
from opentinker_runtime.ml.weights import tensor_bytes
from opentinker_trainer.metrics import (FORWARD_BACKWARD_SECONDS, OPTIM_STEP_SECONDS, count_forward_backward,
                                         count_optimizer_step)
from opentinker_trainer.batching import (Datum, pad_batch, plan_micro_batches, validate_datums,
                                         validate_sequences)
from opentinker_trainer.config import AdamStep, LossConfig, SessionSpec
from opentinker_trainer.errors import NoGradientsError, NoReferenceError, ValidationError
from opentinker_trainer.importance import needs_pre_pass, with_importance_keep
from opentinker_trainer.memory import (MICRO_BATCH_TOKENS, PEAK_MEMORY, StepMemory,
                                       release_step_memory)
from opentinker_trainer.optim import build_optimizer, scheduled_adam_step, set_hyperparameters
from opentinker_trainer.collectives import ReplicaError, all_reduce_gradients, rank_rng_state, shard_datums
from opentinker_trainer.training import (ForwardBackwardResult, ShardResult, accumulate,
                                         batch_norm, combine)

if TYPE_CHECKING:
    from opentinker_trainer.replicas import ReplicaGroup
    from opentinker_trainer.shared_base import BaseHandle

_RNG_LOCK = threading.Lock()


def release_freed_memory(device: str) -> None:
    """Collect what a closed session left (reference cycles of a model included) and hand the
    CUDA allocator's cached blocks back, so the next session finds the device memory free."""
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass(frozen=True, kw_only=True)
class SessionView:
    """What GetSession reports."""

    session_id: str
    job_id: str
    model_info: ModelInfo
    lora: LoraSpec | None
    keep_reference: bool
    step: int
    policy_version: int
    pending_datums: int
    device_ids: tuple[str, ...]
    created_at: float


@dataclass(frozen=True, kw_only=True)
class OptimStepResult:
    step: int
    policy_version: int
    grad_norm: float
    learning_rate: float
    metrics: dict[str, float]
    memory: dict[str, float] = dataclasses.field(default_factory=dict)
    """`memory.PEAK_MEMORY` of the step (not in `metrics`: it differs from run to run)."""


class TrainingSession:
    """Mutable training state of one policy. Build it with `create_session`.

    Data-parallel sessions (`replicas`) have one replica per device: this object is rank 0,
    the others live in worker processes (`opentinker_trainer.replicas`); `group` is the gloo
    group every rank sums gradients over (None on a single device).

    `micro_batch_tokens` is the budget every pass splits its batch by: the spec's, or when
    that is 0 the default `memory.session_micro_batch_tokens` picked at creation.

    `adam_override` is the last OptimStepRequest.adam: once set, every step uses it instead of
    the spec's optimizer config and schedule (a TRAINING_STATE checkpoint records it).

    `base` is the session's hold on a base model shared with other LoRA sessions
    (`shared_base`; None: the model is the session's own), let go when the session closes.
    """

    def __init__(self, *, session_id: str, spec: SessionSpec, model: Any, tokenizer: Any,
                 reference_model: Any | None, device: str, device_ids: tuple[str, ...],
                 rank: int = 0, group: Any | None = None, micro_batch_tokens: int = 0,
                 base: BaseHandle | None = None) -> None:
        self.session_id = session_id
        self.spec = spec
        self.model = model
        self.tokenizer = tokenizer
        self.reference_model = reference_model
        self.device = device
        self.device_ids = device_ids
        self.rank = rank
        self.group = group
        self.replicas: ReplicaGroup | None = None
        self.optimizer = build_optimizer(self.trainable_parameters(), spec.optimizer)
        self.adam_override: AdamStep | None = None
        self.info = describe_model(model, tokenizer)
        self.rng_state = rank_rng_state(spec.seed, rank)
        self.step = 0
        self.policy_version = 0
        self.pending_datums = 0
        self.created_at = time.time()
        self.micro_batch_tokens = micro_batch_tokens or spec.max_tokens_per_micro_batch
        self.memory = StepMemory(device)
        self.base = base

    @property
    def base_key(self) -> str:
        """The key of the shared base this session stands on ("" for a model of its own)."""
        return self.base.key if self.base is not None else ""

    @property
    def has_reference(self) -> bool:
        return self.spec.lora is not None or self.reference_model is not None

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def view(self) -> SessionView:
        return SessionView(
            session_id=self.session_id, job_id=self.spec.job_id, model_info=self.info,
            lora=self.spec.lora, keep_reference=self.spec.keep_reference, step=self.step,
            policy_version=self.policy_version, pending_datums=self.pending_datums,
            device_ids=self.device_ids, created_at=self.created_at)

    def forward_backward(self, datums: Sequence[Datum], loss: LossConfig) -> ForwardBackwardResult:
        """Accumulate the gradients of `loss` over `datums` for the next optim_step."""
        self.memory.start_call()
        with FORWARD_BACKWARD_SECONDS.time():
            result = self._forward_backward(datums, loss)
        count_forward_backward(len(datums), result.num_tokens)
        memory = {PEAK_MEMORY: self.memory.end_call(),
                  MICRO_BATCH_TOKENS: float(self.micro_batch_tokens)}
        return dataclasses.replace(result, memory=memory)

    def _forward_backward(self, datums: Sequence[Datum], loss: LossConfig) -> ForwardBackwardResult:
        validate_datums(datums, loss, vocab_size=self.info.vocab_size,
                        max_length=self.info.max_context_length)
        if loss.needs_reference and not all(d.reference_logprobs for d in datums):
            self._require_reference(f"loss.kl_coef > 0 with KL_PLACEMENT_{loss.kl_placement.upper()}")
        max_tokens = self.micro_batch_tokens
        pre_pass = needs_pre_pass(datums, loss, max_tokens=max_tokens, world_size=self.world_size)
        if pre_pass:
            datums = with_importance_keep(datums, loss, self.policy_logprobs,
                                          max_tokens=max_tokens, device=self.device)
        # Unsplit, the one micro-batch computes its importance mask and norm (no extra forward).
        norm = None if loss.masks_importance and not pre_pass else batch_norm(datums, loss)
        shards = shard_datums([len(d.tokens) for d in datums], self.world_size)
        for rank, shard in enumerate(shards[1:], start=1):
            self.replicas.send(rank, "forward_backward", [datums[i] for i in shard], loss, norm)
        try:
            local = self.accumulate_shard([datums[i] for i in shards[0]], loss, norm)
        finally:
            remote = self.replicas.receive_all() if self.replicas else []
        self.pending_datums += len(datums)
        return combine(datums, list(zip(shards, [local, *remote])))

    @property
    def world_size(self) -> int:
        return self.replicas.world_size if self.replicas else 1

    def accumulate_shard(self, datums: Sequence[Datum], loss: LossConfig,
                         norm: Any) -> ShardResult:
        """Backward of this rank's share of a batch (`norm`: the whole batch's denominators;
        None: this is the whole batch, one micro-batch, which computes its importance mask)."""
        self.model.train()
        with self._session_rng():
            return accumulate(self.model, datums, loss, norm,
                              max_tokens=self.micro_batch_tokens,
                              reference=self.reference_logprobs if self.has_reference else None,
                              device=self.device)

    def optim_step(self, learning_rate: float = 0.0, adam: AdamStep | None = None) -> OptimStepResult:
        """Clip, apply AdamW, clear gradients. `learning_rate` > 0 overrides the rate once;
        `adam` replaces the spec's hyperparameters from this step on (`adam_override`).

        A non-finite gradient norm skips the update (gradients are dropped, step unchanged).
        """
        if not (math.isfinite(learning_rate) and learning_rate >= 0):
            raise ValidationError("learning_rate", f"must be >= 0 (0 = the schedule), got {learning_rate}")
        if adam is not None and learning_rate > 0:
            raise ValidationError("learning_rate", "set either learning_rate or adam (whose "
                                  "learning_rate applies), not both")
        if self.pending_datums == 0:
            raise NoGradientsError("no gradients accumulated since the last OptimStep; call "
                                   "ForwardBackward first")
        if adam is not None:
            self.adam_override = adam
        hyperparameters = self.step_hyperparameters(learning_rate)
        self.memory.start_call()
        with OPTIM_STEP_SECONDS.time():
            grad_norm, applied = self._clip_and_apply(hyperparameters)
        count_optimizer_step(applied)
        self.memory.end_call()
        release_step_memory(self.device)
        rate = hyperparameters.learning_rate
        metrics = {"grad_norm": grad_norm, "learning_rate": rate,
                   "datums": float(self.pending_datums), "skipped_nonfinite": float(not applied)}
        self.pending_datums = 0
        return OptimStepResult(step=self.step, policy_version=self.policy_version,
                               grad_norm=grad_norm, learning_rate=rate, metrics=metrics,
                               memory={PEAK_MEMORY: self.memory.end_step()})

    def step_hyperparameters(self, learning_rate: float = 0.0) -> AdamStep:
        """What the next step applies: the last OptimStepRequest.adam, else the spec's config
        at this step; `learning_rate` > 0 replaces the rate of either."""
        if self.adam_override is None:
            return scheduled_adam_step(self.spec.optimizer, self.step, learning_rate)
        if learning_rate > 0:
            return dataclasses.replace(self.adam_override, learning_rate=learning_rate)
        return self.adam_override

    def _clip_and_apply(self, hyperparameters: AdamStep) -> tuple[float, bool]:
        """Every rank applies the same update; (grad norm, applied) of rank 0."""
        if self.replicas:
            self.replicas.send_all("optim_step", hyperparameters)
        try:
            outcome = self.apply_update(hyperparameters)
        except BaseException:
            if self.replicas:  # the sum failed (a rank timed out): the others answer in time or are cut off
                self.replicas.drain(self.replicas.timeout_s)
            raise
        remote = self.replicas.receive_all() if self.replicas else []
        if any(other != outcome for other in remote):
            raise ReplicaError(f"replicas diverged: rank 0 (grad norm, applied) = {outcome}, "
                               f"the others {remote}")
        return outcome

    def apply_update(self, hyperparameters: AdamStep) -> tuple[float, bool]:
        """Sum gradients over the group (data-parallel), clip, step AdamW with
        `hyperparameters`, clear gradients; (global grad norm before clipping, whether the
        update was applied)."""
        if self.group is not None:
            all_reduce_gradients(self.group, self.trainable_parameters())
        set_hyperparameters(self.optimizer, hyperparameters)
        max_norm = hyperparameters.max_grad_norm or math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), max_norm))
        applied = math.isfinite(grad_norm)
        if applied:
            self.optimizer.step()
            self.step += 1
            self.policy_version += 1
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, applied

    def compute_logprobs(self, sequences: Sequence[Sequence[int]], *, reference: bool,
                         temperature: float) -> list[list[float]]:
        """Per-token logprobs of each sequence (index 0 = 0), without gradients."""
        validate_sequences(sequences, vocab_size=self.info.vocab_size,
                           max_length=self.info.max_context_length)
        if not (math.isfinite(temperature) and temperature > 0):
            raise ValidationError("temperature", f"must be > 0, got {temperature}")
        if reference:
            self._require_reference("reference = true")
        datums = [Datum(tokens=tuple(s), loss_mask=(0.0,) * len(s)) for s in sequences]
        results: list[list[float]] = [[] for _ in datums]
        for indices in plan_micro_batches([len(s) for s in sequences],
                                          self.micro_batch_tokens):
            batch = pad_batch([datums[i] for i in indices], self.device)
            logprobs_B_T = self._logprobs(batch.tokens_B_T, batch.attention_mask_B_T,
                                          temperature, reference)
            for row, index in enumerate(indices):
                results[index] = logprobs_B_T[row, :batch.lengths[row]].tolist()
        return results

    def policy_logprobs(self, tokens_B_T: torch.Tensor, attention_mask_B_T: torch.Tensor,
                        temperature: float) -> torch.Tensor:
        """logprobs_B_T under the current policy, without gradient (no dropout)."""
        return self._logprobs(tokens_B_T, attention_mask_B_T, temperature, reference=False)

    def reference_logprobs(self, tokens_B_T: torch.Tensor, attention_mask_B_T: torch.Tensor,
                           temperature: float) -> torch.Tensor:
        """logprobs_B_T under the reference policy (adapter disabled, or the frozen copy)."""
        return self._logprobs(tokens_B_T, attention_mask_B_T, temperature, reference=True)

    def _logprobs(self, tokens_B_T: torch.Tensor, attention_mask_B_T: torch.Tensor,
                  temperature: float, reference: bool) -> torch.Tensor:
        with torch.no_grad(), _eval_mode(self.model):
            if reference and self.reference_model is not None:
                return token_logprobs(self.reference_model, tokens_B_T, attention_mask_B_T, temperature)
            if reference:
                with self.model.disable_adapter():
                    return token_logprobs(self.model, tokens_B_T, attention_mask_B_T, temperature)
            return token_logprobs(self.model, tokens_B_T, attention_mask_B_T, temperature)

    def parameters_digest(self) -> str:
        """sha256 of the trainable parameters' bytes: equal on every rank of an in-sync session."""
        digest = hashlib.sha256()
        for parameter in self.trainable_parameters():
            digest.update(tensor_bytes(parameter))
        return digest.hexdigest()

    def replicas_in_sync(self) -> bool:
        """Whether every replica holds exactly rank 0's trainable parameters."""
        if not self.replicas:
            return True
        ours = self.parameters_digest()
        return all(theirs == ours for theirs in self.replicas.call_all("parameters_digest"))

    def replica_rng_states(self) -> list[torch.Tensor]:
        """The dropout RNG states of ranks 1..N-1 ([] on a single device)."""
        return self.replicas.call_all("rng_state") if self.replicas else []

    def close(self) -> None:
        """Stop the replica processes of a data-parallel session and free the model, the
        reference and the optimizer state (the session answers only `view` afterwards)."""
        if self.replicas:
            self.replicas.close()
            self.replicas = None
        self.model = self.reference_model = self.optimizer = None
        if self.base is not None:
            self.base.release()
        release_freed_memory(self.device)

    def _require_reference(self, why: str) -> None:
        if not self.has_reference:
            raise NoReferenceError(
                f"{why} needs a reference policy, and this full-parameter session keeps none: "
                "create it with adaptation.full.keep_reference = true, or send "
                "datums[i].reference_logprobs")

    @contextmanager
    def _session_rng(self) -> Iterator[None]:
        """Run with this session's own CPU RNG stream (dropout), leaving the global one as it was.

        One session at a time: torch's generator is process-wide.
        """
        with _RNG_LOCK, torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.rng_state)
            yield
            self.rng_state = torch.get_rng_state()


@contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
