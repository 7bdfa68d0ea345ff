"""Calling user game code in the EnvHost process (isolation "thread"; `sandbox_child` reuses
GameRaised): off the event loop, with a timeout, errors wrapped.

Sync game methods run in daemon worker threads (`DaemonWorkers`): an idle worker takes the
call, and a new worker starts when none is idle, so a game stuck in an endless loop keeps only
its own worker and can neither exhaust a pool nor keep the process from exiting on SIGTERM.
(A fresh thread per call cost ~180 us of blocked event loop per step: bench/envhost.py.) Async
game methods run on the loop. Both are bounded by `asyncio.timeout`. Whatever the game
raises becomes EnvironmentFailure carrying its traceback (GameConfigError becomes
InvalidArgument where the caller says so); running past the timeout is EnvironmentTimeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import queue
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from opentinker_env.game import NotYourTurn
from opentinker_envhost.errors import (
    EnvironmentFailure,
    EnvironmentTimeout,
    InvalidArgument,
    NotYourTurnError,
)
from opentinker_runtime.edge.errors import clip_middle

T = TypeVar("T")
MAX_TRACEBACK_CHARS = 20_000
MAX_MESSAGE_CHARS = 1_000
OUR_DIR = str(Path(__file__).resolve().parent)


class GameRaised(Exception):
    """A game's exception (any BaseException), with its formatted traceback."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {clip_middle(str(error), MAX_MESSAGE_CHARS)}")
        self.error = error
        self.traceback = clip_middle(game_traceback(error), MAX_TRACEBACK_CHARS)


def game_traceback(error: BaseException) -> str:
    """The formatted traceback without the EnvHost's own frames (it starts in the game)."""
    details = traceback.TracebackException.from_exception(error)
    frames = [frame for frame in details.stack if not frame.filename.startswith(OUR_DIR)]
    details.stack = traceback.StackSummary.from_list(frames)
    return "".join(details.format())


async def call_game(fn: Callable[[], Any], *, in_thread: bool, timeout: float, what: str,
                    invalid: tuple[type[Exception], ...] = ()) -> Any:
    """Run `fn` (a game call; it may return an awaitable) and return its result.

    `what` names the call in messages ("MathGame.step()"); exceptions of the `invalid`
    types become InvalidArgument with their message.
    """
    pending = WORKERS.submit(fn) if in_thread else _guarded(fn)
    try:
        async with asyncio.timeout(timeout):
            return await pending
    except GameRaised as raised:
        if isinstance(raised.error, NotYourTurn):
            raise NotYourTurnError(str(raised.error)) from None
        if isinstance(raised.error, invalid):
            raise InvalidArgument(str(raised.error)) from None
        raise EnvironmentFailure(f"{what} raised {raised}", traceback=raised.traceback) from None
    except TimeoutError:
        raise EnvironmentTimeout(f"{what} did not return within {timeout:g}s") from None


class DaemonWorkers:
    """Daemon threads that run sync game calls; idle ones are reused, more start on demand.

    A worker waits `idle_seconds` for its next call, then exits; a worker whose game never
    returns is simply never idle again (the session that called it is broken by its timeout).
    """

    def __init__(self, idle_seconds: float = 30.0) -> None:
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue] = []
        self._started = 0

    @property
    def started(self) -> int:
        """Threads started so far (for tests and metrics)."""
        return self._started

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """A future for `fn()` on a worker thread; its exception arrives as GameRaised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = (fn, loop, future)
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self._started += 1
        if inbox is not None:
            inbox.put(job)
        else:
            threading.Thread(target=self._work, args=(job,), name=f"game-worker-{self._started}",
                             daemon=True).start()
        return future

    def _work(self, job: tuple) -> None:
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        while job is not None:
            fn, loop, future = job
            outcome = _outcome(fn)
            with self._lock:  # idle before the caller hears back, so its next call reuses us
                self._idle.append(inbox)
            with contextlib.suppress(RuntimeError):  # the loop closed (the server stopped meanwhile)
                loop.call_soon_threadsafe(_settle, future, outcome)
            try:
                job = inbox.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                job = inbox.get()  # handed a job just as the wait ran out


def _outcome(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except BaseException as error:  # noqa: BLE001 - user code: every failure is reported
        return False, GameRaised(error)


WORKERS = DaemonWorkers()


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():  # cancelled by a timeout or a cancelled RPC
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


async def _guarded(fn: Callable[[], Any]) -> Any:
    try:
        result = fn()
        return await result if inspect.isawaitable(result) else result
    except asyncio.CancelledError:
        raise
    except BaseException as error:  # noqa: BLE001 - user code: every failure is reported
        raise GameRaised(error) from None
