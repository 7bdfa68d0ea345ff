"""Training runs: a Tinker training client's model, on its SESSION job's Trainer session.

A run's calls execute in the order of their `seq_id` (the SDK numbers every training request of a
model from 1 and may send them concurrently); `SeqTurns` holds each call until the one before it
has finished. The model id is `<client session>:train:<n>`, as the SDK derives it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import structlog

from opentinker_gateway.backend import JobBackend
from opentinker_gateway.catalog import CatalogModel
from opentinker_gateway.errors import Conflict, NotFound
from opentinker_gateway.records import LoraSettings

log = structlog.get_logger("opentinker.gateway.runs")
ATTN_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
UNEMBED_MODULES = ("lm_head",)
LORA_ALPHA = 32.0
"""Tinker's LoRA scale: alpha 32 whatever the rank."""


class SeqTurns:
    """Runs calls in seq_id order: seq k waits until every seq below it has finished or was
    skipped (a request refused before it started still used its number on the client)."""

    def __init__(self, first: int = 1) -> None:
        self.next = first
        self._finished: set[int] = set()
        self._changed = asyncio.Condition()

    @asynccontextmanager
    async def turn(self, seq_id: int | None) -> AsyncIterator[None]:
        if not seq_id:
            yield
            return
        async with self._changed:
            await self._changed.wait_for(lambda: self.next >= seq_id)
        if seq_id < self.next:
            raise Conflict(f"seq_id {seq_id} already ran (the model is at {self.next}); "
                           f"a retry of a finished request gets its first answer")
        try:
            yield
        finally:
            await self.finish(seq_id)

    async def finish(self, seq_id: int | None) -> None:
        """Count `seq_id` as done (also for a request refused before it ran)."""
        if not seq_id:
            return
        async with self._changed:
            self._finished.add(seq_id)
            while self.next in self._finished:
                self._finished.discard(self.next)
                self.next += 1
            self._changed.notify_all()


@dataclass(eq=False)
class TrainingRun:
    model_id: str
    tenant_id: str
    tenant_key: str
    client_session: str
    base_model: CatalogModel
    lora: LoraSettings
    backend: JobBackend
    trainer_session: str
    turns: SeqTurns = field(default_factory=SeqTurns)
    step: int = 0
    policy_version: int = 0
    """The Trainer session's weights version (0: as created: a fresh adapter changes nothing)."""
    last_request: float = field(default_factory=time.time)
    sampler_policies: dict[str, str] = field(default_factory=dict)
    """Rollout policy id per sampler path (and per ephemeral sampling session id)."""
    closed: bool = False

    @property
    def job_id(self) -> str:
        return self.backend.placement.job_id

    def touch(self) -> None:
        self.last_request = time.time()


@dataclass(eq=False)
class SamplerHost:
    """A client session's devices for samplers of no live training run of its own (a saved sampler
    checkpoint, or a base model): a SESSION job leased on first use, whose Trainer only restores
    checkpoints' adapters for the Rollout."""

    tenant_id: str
    client_session: str
    backend: JobBackend
    sampler_policies: dict[str, str] = field(default_factory=dict)
    closed: bool = False

    @property
    def job_id(self) -> str:
        return self.backend.placement.job_id

    @property
    def model_id(self) -> str:
        return f"{self.client_session}:samplers"


def adaptation(lora: LoraSettings) -> dict:
    modules = [*(ATTN_MODULES if lora.train_attn else ()), *(MLP_MODULES if lora.train_mlp else ()),
               *(UNEMBED_MODULES if lora.train_unembed else ())]
    return {"lora": {"rank": lora.rank, "alpha": LORA_ALPHA, "target_modules": modules}}


class Runs:
    """The live runs of this gateway, by model id."""

    def __init__(self) -> None:
        self._runs: dict[str, TrainingRun] = {}

    def add(self, run: TrainingRun) -> None:
        self._runs[run.model_id] = run

    def get(self, tenant_id: str, model_id: str) -> TrainingRun:
        run = self._runs.get(model_id)
        if run is None or run.tenant_id != tenant_id or run.closed:
            raise NotFound(f"no live training run {model_id!r} (unknown, ended, or not yours)")
        return run

    def find(self, model_id: str) -> TrainingRun | None:
        return self._runs.get(model_id)

    def of_session(self, client_session: str) -> list[TrainingRun]:
        return [run for run in self._runs.values() if run.client_session == client_session]

    def of_job(self, job_id: str) -> TrainingRun | None:
        return next((run for run in self._runs.values() if run.job_id == job_id), None)

    def of_tenant(self, tenant_id: str) -> list[TrainingRun]:
        return [run for run in self._runs.values() if run.tenant_id == tenant_id and not run.closed]

    def remove(self, run: TrainingRun) -> None:
        self._runs.pop(run.model_id, None)

    def all(self) -> list[TrainingRun]:
        return list(self._runs.values())
