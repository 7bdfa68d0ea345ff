"""Futures: work a request started, kept until its caller retrieves the result.

A submit answers at once with a request id; `retrieve` waits up to a long-poll deadline for the
result and says "still running" when it passes (the HTTP layer answers 408, and the SDK asks
again). A retried submit (same tenant, same dedupe key: a model's seq_id) gets the same future, so
the work runs once. Finished futures are forgotten `ttl_seconds` after they finish.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from opentinker_gateway.errors import GatewayError, NotFound

log = structlog.get_logger("opentinker.gateway.futures")


@dataclass
class Future:
    request_id: str
    tenant_id: str
    kind: str
    task: asyncio.Task[Any]
    created: float = field(default_factory=time.monotonic)
    finished: float | None = None


@dataclass(frozen=True)
class Pending:
    """Not done yet: ask again."""


@dataclass(frozen=True)
class Done:
    value: Any


@dataclass(frozen=True)
class Failed:
    error: GatewayError


Outcome = Pending | Done | Failed


class FutureStore:
    def __init__(self, *, ttl_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self._futures: dict[str, Future] = {}
        self._by_key: dict[tuple[str, str], str] = {}

    def submit(self, tenant_id: str, kind: str, work: Awaitable[Any], *, dedupe_key: str = "") -> str:
        """Start `work`; its request id. With a dedupe key seen before, the earlier future's id
        (and `work` is closed unrun)."""
        if dedupe_key and (existing := self._by_key.get((tenant_id, dedupe_key))) in self._futures:
            _close(work)
            return existing
        request_id = f"{kind.lower()}-{uuid.uuid4().hex}"
        task = asyncio.ensure_future(work)
        future = Future(request_id=request_id, tenant_id=tenant_id, kind=kind, task=task, created=self.clock())
        task.add_done_callback(lambda _: self._mark_finished(future))
        self._futures[request_id] = future
        if dedupe_key:
            self._by_key[(tenant_id, dedupe_key)] = request_id
        return request_id

    async def retrieve(self, tenant_id: str, request_id: str, *, wait_seconds: float) -> Outcome:
        """The outcome, waiting up to `wait_seconds`; NotFound for another tenant's id."""
        future = self._futures.get(request_id)
        if future is None or future.tenant_id != tenant_id:
            raise NotFound(f"no request {request_id!r} (unknown, expired, or not yours)")
        done, _ = await asyncio.wait({future.task}, timeout=wait_seconds)
        if not done:
            return Pending()
        error = future.task.exception()
        if error is None:
            return Done(future.task.result())
        if isinstance(error, GatewayError):
            return Failed(error)
        return Failed(GatewayError(f"{future.kind} failed: {type(error).__name__}: {error}"))

    def prune(self) -> int:
        """Forget futures finished more than ttl_seconds ago; how many went."""
        now = self.clock()
        stale = [f.request_id for f in self._futures.values()
                 if f.finished is not None and now - f.finished > self.ttl_seconds]
        for request_id in stale:
            self._futures.pop(request_id, None)
        self._by_key = {key: rid for key, rid in self._by_key.items() if rid in self._futures}
        return len(stale)

    def cancel_all(self) -> None:
        for future in self._futures.values():
            future.task.cancel()

    def __len__(self) -> int:
        return len(self._futures)

    def _mark_finished(self, future: Future) -> None:
        future.finished = self.clock()
        if not future.task.cancelled() and (error := future.task.exception()) is not None \
                and not isinstance(error, GatewayError):
            log.error("future_failed", request_id=future.request_id, kind=future.kind, exc_info=error)


def _close(work: Awaitable[Any]) -> None:
    close = getattr(work, "close", None)
    if close is not None:
        close()
