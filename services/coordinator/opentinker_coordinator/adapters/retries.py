"""Riding out short outages of a worker or the Scheduler (a dropped connection, a restart).

Every call the Coordinator retries is idempotent: Trainer calls carry request_ids the Trainer
deduplicates (ForwardBackward, OptimStep, SaveCheckpoint, CreateSession), reports to the
Scheduler carry request_ids it deduplicates, RunEpisodes and a weight sync are re-run whole,
and LoadCheckpoint / LoadModel set state rather than change it. Only UNAVAILABLE is retried
(the call did not reach a live server, or its connection died); every other code is an answer.

A worker that restarted lost the job's session or policy: its calls answer NOT_FOUND, and a
worker unreachable past the retry budget is as good as gone. Both raise `WorkerLost`; the
Coordinator then waits for the Scheduler to re-queue the job (the restart dropped its leases).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
import structlog

from opentinker_coordinator.driver.pipeline import StopRequested

log = structlog.get_logger(__name__)

T = TypeVar("T")
Notify = Callable[[str, str], Awaitable[None]]
"""notify(level, message): tell the job's event stream (best effort)."""

TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE})
WORKER_FORGOT = frozenset({grpc.StatusCode.NOT_FOUND})


@dataclass(frozen=True, kw_only=True)
class RetryBudget:
    seconds: float = 30.0
    """How long to keep retrying one call before giving up."""
    initial_delay: float = 0.1
    max_delay: float = 2.0

    def delay(self, retry: int) -> float:
        return min(self.max_delay, self.initial_delay * 2 ** retry) * random.uniform(0.8, 1.2)


class WorkerLost(Exception):
    """A worker the job runs on restarted (it forgot the job) or stayed unreachable."""

    def __init__(self, role: str, cause: grpc.aio.AioRpcError) -> None:
        super().__init__(f"{role} lost: {cause.code().name}: {cause.details()}")
        self.role, self.cause = role, cause


class Interrupted(StopRequested):
    """The run was stopped (re-queued or cancelled) while a call was being retried."""


@dataclass(kw_only=True)
class CallGuard:
    """Retries one run's calls to one peer; tells the job's events about outages."""

    peer: str
    """"trainer", "rollout", "scheduler": named in events and logs."""
    budget: RetryBudget
    stop: asyncio.Event | None = None
    notify: Notify | None = None
    """Where outages are told as they happen; None (the Scheduler's own guard: its outage cannot
    be reported through it) keeps the messages in `untold` for the caller to report later."""
    untold: list[tuple[str, str]] = field(default_factory=list)

    async def call(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """`await attempt()`, retried through UNAVAILABLE; NOT_FOUND or an exhausted budget
        raise WorkerLost (for workers; the Scheduler's errors pass through as they are)."""
        try:
            return await self._retrying(what, attempt)
        except grpc.aio.AioRpcError as error:
            if self.peer != "scheduler" and error.code() in TRANSIENT | WORKER_FORGOT:
                raise WorkerLost(self.peer, error) from error
            raise

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        started, retry = 0.0, 0
        while True:
            try:
                result = await attempt()
            except grpc.aio.AioRpcError as error:
                if error.code() not in TRANSIENT:
                    raise
                now = time.monotonic()
                if retry == 0:
                    started = now
                    await self._tell("warning", f"{self.peer} call {what} interrupted ({error.code().name}: "
                                                f"{error.details()}); retrying for up to {self.budget.seconds:g} s")
                if now - started >= self.budget.seconds:
                    raise
                await self._pause(self.budget.delay(retry))
                retry += 1
                continue
            if retry:
                await self._tell("info", f"{self.peer} call {what} succeeded after {retry} "
                                         f"{'retry' if retry == 1 else 'retries'} "
                                         f"({time.monotonic() - started:.1f} s)")
            return result

    async def _pause(self, seconds: float) -> None:
        if self.stop is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        if self.stop.is_set():
            raise Interrupted(f"stopped while retrying a {self.peer} call")

    async def _tell(self, level: str, message: str) -> None:
        getattr(log, level)("peer_call_" + ("interrupted" if level == "warning" else "recovered"),
                            peer=self.peer, message=message)
        if self.notify is None:
            self.untold.append((level, message))
            return
        with contextlib.suppress(Exception):  # an event about an outage must not cause one
            await self.notify(level, message)
