"""A game process shared by several sessions of one owner, game and config (process isolation).

Each session is a slot of the process. A call to an idle process goes at the end of the current
turn of the event loop, in one frame (`sandbox_protocol`: a JSON list) with every other call made
in that turn; calls made while the process works on a batch wait for its reply, then go together.
The process runs a frame's calls in order and answers them in order, so a step costs it one
wake-up per batch rather than one per call. It runs each call under the same per-call CPU budget
as a process of its own.

When the process dies or is killed, every call it had not answered is lost, and `CallLost` says
how each one relates to the loss:

* CULPRIT: it was the only call of the batch the process was running: the loss is its own
  (crash, memory or CPU-time limit, timeout), and its session fails as it would alone;
* SUSPECT: it was in that batch with others: any of them may have caused it, so each session
  is rebuilt and its call run again alone, where the one that caused it fails as a CULPRIT;
* INNOCENT: it was queued behind that batch: its session is rebuilt and its call run again.

Rebuilding (`shared_game`) replays a session's episode in another process. A batch running past
the call timeout gets the process killed (the same blame applies).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from opentinker_envhost import sandbox_protocol as wire
from opentinker_envhost.errors import EnvironmentCrashed, EnvironmentTimeout
from opentinker_envhost.limits import SessionLimits
from opentinker_envhost.sandbox_connection import GameProcess

EXIT_WAIT_S = 5.0
"""How long a dead or killed process may take to be reported reaped."""

log = structlog.get_logger(__name__)


class Blame(enum.Enum):
    CULPRIT = "culprit"
    SUSPECT = "suspect"
    INNOCENT = "innocent"


class CallLost(Exception):
    """The process died with this call unanswered; `blame` says how the call relates to it."""

    def __init__(self, blame: Blame) -> None:
        super().__init__(blame.value)
        self.blame = blame


class SharedWorker:
    """One game process serving the slots (sessions) of one key, calls batched per loop turn."""

    def __init__(self, key: tuple[str, ...], *, capacity: int, limits: SessionLimits,
                 kill: Callable[[int], None], private: bool = False) -> None:
        self.key = key
        self.capacity = 1 if private else capacity
        self.private = private
        """A process of one session's own (its key is slow, or its call is a suspect)."""
        self.moving: set[int] = set()
        """Slots whose sessions move to another process at their next call (`lower_capacity`)."""
        self.limits = limits
        self.kill_pid = kill
        self.process: GameProcess | None = None
        self.ready: asyncio.Future[GameProcess] = asyncio.get_running_loop().create_future()
        self.slots: dict[int, str] = {}
        """Slot -> the session id it serves."""
        self.slot_numbers = itertools.count()
        self.outbox: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []
        self.flushing = False
        self.frames: collections.deque[list[asyncio.Future[Any]]] = collections.deque()
        """Batches sent and not wholly answered, oldest (the one running) first."""
        self.head_answered = 0
        """How many calls of the oldest batch were answered."""
        self.head_since = 0.0
        self.watchdog: asyncio.TimerHandle | None = None
        self.tainted = False
        """A call raised, or a close found the process not reusable: it takes no new session
        and is not kept once its last session closes."""
        self.killed_for = ""
        self.lost = False
        """Known to be gone (the exit or a broken connection was seen)."""
        self.batches = 0
        """Frames of calls sent to the process."""
        self.blames: dict[asyncio.Future[Any], Blame] | None = None

    # -- life ---------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    @property
    def gone(self) -> bool:
        """The process died or was killed (or never started)."""
        if self.lost:
            return True
        if self.process is None:
            return self.ready.done()  # its start failed
        if not self.process.alive:
            self.lost = True
        return self.lost

    @property
    def busy(self) -> bool:
        """Calls are queued or unanswered (its process may not go to another worker yet)."""
        return bool(self.outbox or self.frames)

    def accepts(self) -> bool:
        """Whether a new session may be placed here."""
        return not self.tainted and not self.gone and len(self.slots) < self.capacity

    def add_slot(self, session_id: str) -> int:
        slot = next(self.slot_numbers)
        self.slots[slot] = session_id
        self._label_output()
        return slot

    def remove_slot(self, slot: int) -> None:
        self.slots.pop(slot, None)
        self.moving.discard(slot)
        self._label_output()

    def lower_capacity(self, capacity: int) -> None:
        """Serve at most `capacity` sessions: the ones placed last beyond it move at their next call."""
        self.capacity = min(self.capacity, capacity)
        self.moving.update(sorted(self.slots)[self.capacity:])

    async def start(self, get_process: Awaitable[GameProcess]) -> None:
        """Take the process (a warm one or a new fork); sessions placed meanwhile wait for it."""
        try:
            process = await get_process
        except BaseException as error:
            self.ready.set_exception(error)
            self.ready.exception()
            raise
        self.process = process
        process.connection.on_reply = self._answered
        process.connection.on_broken = self._on_broken
        process.exited.add_done_callback(lambda _: self._on_exit())
        self._label_output()
        self.ready.set_result(process)

    def kill(self, reason: str) -> None:
        """End the process at once; its unanswered calls get CallLost."""
        self.killed_for = self.killed_for or reason
        self.tainted = True
        if self.process is not None and not self.process.exited.done():
            self.kill_pid(self.process.pid)

    # -- calls --------------------------------------------------------------------------------

    async def call(self, slot: int, request: dict[str, Any], *, alone: bool = False) -> Any:
        """Send `request` for `slot` in the next batch (alone: in a batch of its own) and return
        the process's reply (a dict with "ok" or "error", and "s", its wall seconds);
        CallLost when the process dies first."""
        if not self.ready.done():
            await asyncio.shield(self.ready)
        if self.gone:
            raise CallLost(Blame.INNOCENT)
        future = self.submit(slot, request, alone=alone)
        try:
            return await future  # a caller that gives up cancels it: its reply is then dropped
        except (ConnectionError, wire.ProtocolError):
            raise CallLost(self._blame_of(future)) from None

    def submit(self, slot: int, request: dict[str, Any], *, alone: bool = False,
               on_reply: Callable[[SoonReply], None] | None = None) -> asyncio.Future[Any] | SoonReply:
        """`call` without waiting, for a started process that is not gone: the future of the
        reply, which fails with ConnectionError or ProtocolError when the process dies first
        (`lost_call` then says how the call relates to the loss); with `on_reply`, a SoonReply
        that calls it as soon as the reply arrives or the call is lost."""
        future = asyncio.get_running_loop().create_future() if on_reply is None else SoonReply(on_reply)
        request["slot"] = slot
        if alone:
            self._flush()
            self.outbox.append((request, future))
            self._flush()
        else:
            self.outbox.append((request, future))
            if not self.frames:
                self._flush_soon()  # with the calls made in this turn of the event loop
            # else: the batch the process runs is answered first (`_answered` sends these then)
        return future

    def _on_broken(self) -> None:
        """The wire broke: calls held back fail now (INNOCENT), not when a batch would have gone."""
        if self.outbox:
            self._flush_soon()

    def _flush_soon(self) -> None:
        if not self.flushing:
            self.flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    @property
    def started(self) -> bool:
        """Its process is up and not known to be gone: `submit` may be used."""
        return self.process is not None and not self.gone

    def lost_call(self, future: asyncio.Future[Any]) -> CallLost:
        """The CallLost of a submitted call whose process died before answering it."""
        return CallLost(self._blame_of(future))

    async def replay(self, slot: int, requests: list[dict[str, Any]]) -> list[Any]:
        """Send `requests` for `slot` as a batch of their own (a session rebuilt here) and return
        their replies; CallLost when the process dies first."""
        if not self.ready.done():
            await asyncio.shield(self.ready)
        if self.gone:
            raise CallLost(Blame.INNOCENT)
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in requests]
        self._flush()
        for request, future in zip(requests, futures, strict=True):
            self.outbox.append(({**request, "slot": slot}, future))
        self._flush()
        try:
            return [await future for future in futures]
        except (ConnectionError, wire.ProtocolError):
            raise CallLost(self._blame_of(futures[0])) from None

    def forget(self, slot: int) -> None:
        """Drop `slot`'s game without waiting (its session moved or was discarded)."""
        self.remove_slot(slot)
        if not self.gone and self.ready.done():
            self.outbox.append(({"call": "close", "slot": slot}, _ignored_future()))
            if not self.flushing:
                self.flushing = True
                asyncio.get_running_loop().call_soon(self._flush)

    async def loss(self, what: str) -> EnvironmentCrashed | EnvironmentTimeout:
        """The error of the call whose process was lost under it (a CULPRIT)."""
        if self.killed_for.startswith("timeout"):
            return EnvironmentTimeout(f"{what} did not return within {self.limits.call_timeout_s:g}s; "
                                      "its process was killed")
        status = await self._wait_exit()
        described, kind = wire.describe_exit(status, memory_limit_mb=self.limits.memory_limit_mb,
                                             cpu_seconds=self.limits.cpu_seconds_per_call)
        if self.killed_for:
            described = self.killed_for
        tail = self.process.output.tail_text() if self.process is not None else ""
        return EnvironmentCrashed(f"{what} failed: the game's process {described}", metric_kind=kind,
                                  traceback=f"last output of the game's process:\n{tail}" if tail else "")

    # -- internals ------------------------------------------------------------------------------

    def _flush(self) -> None:
        self.flushing = False
        if not self.outbox or self.process is None:
            return
        batch, self.outbox = self.outbox, []
        futures = [future for _, future in batch]
        if self.process.connection.broken is not None or self.blames is not None:
            self._blame_frames()
            self._blame_all(futures, Blame.INNOCENT)  # queued behind the loss
            for future in futures:
                _fail(future, ConnectionError("the game's process is gone"))
            return
        payload = wire.encode_calls([request for request, _ in batch])
        self.batches += 1
        if not self.frames:
            self._new_head()
        self.frames.append(futures)
        self.process.connection.send_batch(payload, futures)

    def _answered(self) -> None:
        """A reply arrived: when the running batch is wholly answered, the next one runs."""
        self.head_answered += 1
        if self.frames and self.head_answered >= len(self.frames[0]):
            self.frames.popleft()
            self.head_answered = 0
            if self.frames:
                self._new_head()
            elif self.outbox and not self.flushing:
                self._flush()  # what arrived while that batch ran: the next batch

    def _new_head(self) -> None:
        loop = asyncio.get_running_loop()
        self.head_since = loop.time()
        if self.watchdog is None:
            self.watchdog = loop.call_at(self.head_since + self.limits.call_timeout_s, self._check_head)

    def _check_head(self) -> None:
        """Kill the process when the batch it runs has run past the call timeout."""
        self.watchdog = None
        if not self.frames or self.gone:
            return
        loop = asyncio.get_running_loop()
        deadline = self.head_since + self.limits.call_timeout_s
        if loop.time() >= deadline:
            self.kill(f"timeout: a call ran past {self.limits.call_timeout_s:g}s; it was killed")
            return
        self.watchdog = loop.call_at(deadline, self._check_head)

    def _blame_of(self, future: asyncio.Future[Any]) -> Blame:
        self._blame_frames()
        return self.blames.get(future, Blame.INNOCENT)  # type: ignore[union-attr]

    def _blame_frames(self) -> None:
        """Once the process is gone: the batch it was running holds the culprit (if it held one
        call) or the suspects; the batches queued behind it are innocent."""
        if self.blames is not None:
            return
        self.blames = {}
        for position, frame in enumerate(self.frames):
            blame = Blame.INNOCENT if position else (Blame.CULPRIT if len(frame) == 1 else Blame.SUSPECT)
            self._blame_all(frame[self.head_answered:] if position == 0 else frame, blame)
        self.frames.clear()

    def _blame_all(self, futures: list[asyncio.Future[Any]], blame: Blame) -> None:
        for future in futures:
            self.blames.setdefault(future, blame)  # type: ignore[union-attr]

    def _on_exit(self) -> None:
        self.tainted = True
        self.lost = True
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        if self.process is not None:
            self.process.connection.close()  # unanswered calls fail now, not at end of stream

    async def _wait_exit(self) -> int | None:
        if self.process is None:
            return None
        exited = self.process.exited
        try:
            return await asyncio.wait_for(asyncio.shield(exited), EXIT_WAIT_S)
        except TimeoutError:
            self.kill("did not exit; it was killed")
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(exited), EXIT_WAIT_S)
        return None

    def _label_output(self) -> None:
        if self.process is not None:
            self.process.output.next_session(",".join(self.slots.values()))


class SoonReply:
    """The reply of a call made with `submit(on_reply=...)`: `on_reply(self)` runs as soon as it
    is set (in the reply's callback from the wire, with no turn of the event loop in between), at
    most once; a failure of it is logged, never raised to the wire. The subset of
    asyncio.Future the wire and the worker use."""

    __slots__ = ("on_reply", "value", "error", "settled")

    def __init__(self, on_reply: Callable[[SoonReply], None]) -> None:
        self.on_reply = on_reply
        self.value: Any = None
        self.error: BaseException | None = None
        self.settled = False

    def done(self) -> bool:
        return self.settled

    @staticmethod
    def cancelled() -> bool:
        return False

    def set_result(self, value: Any) -> None:
        self.value = value
        self._settle()

    def set_exception(self, error: BaseException) -> None:
        self.error = error
        self._settle()

    def exception(self) -> BaseException | None:
        return self.error

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value

    def _settle(self) -> None:
        if self.settled:
            raise asyncio.InvalidStateError("the reply is already set")
        self.settled = True
        try:
            self.on_reply(self)
        except Exception:  # noqa: BLE001 - the wire goes on for the other calls
            log.exception("game_reply_callback_failed")


def _ignored_future() -> asyncio.Future[Any]:
    future = asyncio.get_running_loop().create_future()
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return future


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
        future.exception()
