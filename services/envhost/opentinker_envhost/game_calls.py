"""Calling user game code safely: off the event loop, with a timeout, errors wrapped.

Sync game methods run in a fresh daemon thread per call (like `asyncio.to_thread`, but a game
stuck in an endless loop can neither exhaust a shared pool nor keep the process from exiting
on SIGTERM). Async game methods run on the loop under `asyncio.wait_for`. Whatever the game
raises becomes EnvironmentFailure carrying its traceback (GameConfigError becomes
InvalidArgument where the caller says so); running past the timeout is EnvironmentTimeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from opentinker.env.game import NotYourTurn
from opentinker_envhost.errors import (
    EnvironmentFailure,
    EnvironmentTimeout,
    InvalidArgument,
    NotYourTurnError,
    clip_middle,
)

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
    pending = run_in_daemon_thread(fn, what) if in_thread else _guarded(fn)
    try:
        return await asyncio.wait_for(pending, timeout)
    except GameRaised as raised:
        if isinstance(raised.error, NotYourTurn):
            raise NotYourTurnError(str(raised.error)) from None
        if isinstance(raised.error, invalid):
            raise InvalidArgument(str(raised.error)) from None
        raise EnvironmentFailure(f"{what} raised {raised}", traceback=raised.traceback) from None
    except TimeoutError:
        raise EnvironmentTimeout(f"{what} did not return within {timeout:g}s") from None


def run_in_daemon_thread(fn: Callable[[], T], name: str) -> asyncio.Future[T]:
    """A future for `fn()` run in a new daemon thread; its exception arrives as GameRaised."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def target() -> None:
        try:
            outcome: tuple[bool, Any] = (True, fn())
        except BaseException as error:  # noqa: BLE001 - user code: every failure is reported
            outcome = (False, GameRaised(error))
        with contextlib.suppress(RuntimeError):  # the loop closed (the server stopped meanwhile)
            loop.call_soon_threadsafe(_settle, future, outcome)

    threading.Thread(target=target, name=f"game:{name}", daemon=True).start()
    return future


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
