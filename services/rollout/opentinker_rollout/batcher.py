"""An async generation scheduler: many episodes ask, one batched engine call answers.

Episodes call `await batcher.generate(request)` concurrently. A single worker task takes
what is pending (up to `max_batch_size` sample rows, after a short gathering window), runs
one `engine.generate` in a worker thread and resolves each caller's future. While the engine
decodes, the event loop keeps serving episodes that talk to their environment, and new
requests queue for the next batch.

The worker holds a lock for each engine call; `exclusive()` takes the same lock, so weights
can be swapped (and a version raised) between two batches, never during one. Versions are
kept per adapter (the policies of several jobs can share one base model and one batcher,
each its own LoRA adapter); every answer carries the version its adapter had while it was
generated.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import structlog

from opentinker_rollout.engine import Engine, Generation, GenerationRequest
from opentinker_rollout.engine_thread import run_in_engine_thread

log = structlog.get_logger(__name__)


class BatcherClosed(RuntimeError):
    """The batcher was closed (its policy unloaded) before the request was answered."""


@dataclass(frozen=True, kw_only=True)
class BatchedGeneration:
    """The n generations of one request and the policy version that produced them."""

    generations: list[Generation]
    policy_version: int


@dataclass(kw_only=True)
class BatcherStats:
    engine_calls: int = 0
    requests: int = 0
    rows: int = 0
    generated_tokens: int = 0
    max_rows_in_call: int = 0


@dataclass(frozen=True, kw_only=True)
class _Pending:
    request: GenerationRequest
    future: asyncio.Future[BatchedGeneration]


class GenerationBatcher:
    """Gathers concurrent generation requests into batched engine calls."""

    def __init__(self, engine: Engine, *, max_batch_size: int = 32,
                 gather_window_s: float = 0.002) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.stats = BatcherStats()
        self.versions: dict[str, int] = {}
        """Version of each adapter's weights ("" = the model as loaded; absent = 0); change
        them only inside `exclusive()`."""
        self._closed_adapters: set[str] = set()
        self._gather_window_s = gather_window_s
        self._pending: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._lock = asyncio.Lock()
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self._in_flight: list[_Pending] = []

    async def generate(self, request: GenerationRequest) -> BatchedGeneration:
        """The request's `sampling.n` generations, from whichever batch it lands in."""
        if self._closed or request.adapter in self._closed_adapters:
            raise BatcherClosed("the policy was unloaded")
        future: asyncio.Future[BatchedGeneration] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(request=request, future=future))
        self._wakeup.set()
        self._ensure_worker()
        return await future

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """No engine call runs while this is held (weight updates)."""
        async with self._lock:
            yield

    def version(self, adapter: str = "") -> int:
        return self.versions.get(adapter, 0)

    def close_adapter(self, adapter: str) -> None:
        """Refuse the adapter's later requests and fail its waiting ones (its policy is gone);
        call inside `exclusive()` so none of its requests is in the engine."""
        self._closed_adapters.add(adapter)
        self.versions.pop(adapter, None)
        gone = [item for item in self._pending if item.request.adapter == adapter]
        self._pending = [item for item in self._pending if item.request.adapter != adapter]
        _fail_all(gone, BatcherClosed("the policy was unloaded"))

    async def close(self) -> None:
        """Stop the worker; callers still waiting get BatcherClosed, later calls too."""
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None
        _fail_all([*self._in_flight, *self._pending], BatcherClosed("the policy was unloaded"))
        self._pending.clear()

    def _ensure_worker(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._run(), name="generation-batcher")

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            await asyncio.sleep(self._gather_window_s)
            batch = self._take_batch()
            if not self._pending:
                self._wakeup.clear()
            if batch:
                await self._run_batch(batch)

    def _take_batch(self) -> list[_Pending]:
        """Pending requests (cancelled ones dropped) up to max_batch_size rows; at least one."""
        self._pending = [item for item in self._pending if not item.future.done()]
        batch: list[_Pending] = []
        rows = 0
        while self._pending:
            n = self._pending[0].request.sampling.n
            if batch and rows + n > self.max_batch_size:
                break
            batch.append(self._pending.pop(0))
            rows += n
        return batch

    async def _run_batch(self, batch: list[_Pending]) -> None:
        self._in_flight = batch
        async with self._lock:
            batch = self._drop_closed_adapters(batch)
            if not batch:
                return
            requests = [item.request for item in batch]
            versions = [self.version(item.request.adapter) for item in batch]
            try:
                results = await run_in_engine_thread(self.engine.generate, requests)
            except Exception as error:  # noqa: BLE001 - delivered to every caller of the batch
                log.exception("engine_call_failed", requests=len(requests))
                _fail_all(batch, error)
                return
        self._record(results)
        for item, generations, version in zip(batch, results, versions, strict=True):
            if not item.future.done():
                item.future.set_result(BatchedGeneration(generations=generations,
                                                         policy_version=version))

    def _drop_closed_adapters(self, batch: list[_Pending]) -> list[_Pending]:
        """Requests whose adapter was closed while the batch waited for the lock fail alone."""
        gone = [item for item in batch if item.request.adapter in self._closed_adapters]
        _fail_all(gone, BatcherClosed("the policy was unloaded"))
        return [item for item in batch if item.request.adapter not in self._closed_adapters]

    def _record(self, results: list[list[Generation]]) -> None:
        rows = sum(len(generations) for generations in results)
        self.stats.engine_calls += 1
        self.stats.requests += len(results)
        self.stats.rows += rows
        self.stats.max_rows_in_call = max(self.stats.max_rows_in_call, rows)
        self.stats.generated_tokens += sum(len(g.token_ids) for gens in results for g in gens)


def _fail_all(batch: list[_Pending], error: Exception) -> None:
    for item in batch:
        if not item.future.done():
            item.future.set_exception(error)
