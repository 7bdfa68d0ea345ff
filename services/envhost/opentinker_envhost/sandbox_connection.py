"""The EnvHost's end of one game process: its session socket as an asyncio protocol, its output
and its wait status.

A process of its own gets one request in flight at a time (the session's lock orders calls):
`exchange` writes a frame and waits for the reply frame. A shared process (`shared_worker`) gets
batches: `send_batch` writes one frame of several calls and returns a future per call, which its
reply resolves (the process answers a batch in order, in one or more list frames). Replies are
parsed in `data_received` straight off the event loop's read callback (no stream reader, no task,
no timer per call besides a dedicated call's deadline). A reply nobody asked for, a frame over
the size limit or a stream that ends fails every call in flight and every later one.
"""

from __future__ import annotations

import asyncio
import collections
import socket
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from opentinker_envhost import sandbox_protocol as wire
from opentinker_envhost.game_output import GameOutput


class ConnectionLost(ConnectionError):
    """The game process closed its end of the session socket (it exited, or was killed)."""


class GameConnection(asyncio.Protocol):
    """One game process's session socket."""

    def __init__(self, frame_limit: int) -> None:
        self.frame_limit = frame_limit
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        """Calls sent and not answered yet, oldest first."""
        self.broken: BaseException | None = None
        self.on_reply: Callable[[], None] | None = None
        """Told of every reply delivered (a shared process counts its batches' replies)."""
        self.on_broken: Callable[[], None] | None = None
        """Told once when the wire breaks (a shared process fails the calls it held back)."""

    @classmethod
    async def open(cls, sock: socket.socket, frame_limit: int) -> GameConnection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_unix_connection(lambda: cls(frame_limit), sock=sock)
        return connection

    async def exchange(self, payload: bytes, deadline: float) -> bytes:
        """Send one request frame and return the reply's payload; TimeoutError at `deadline`
        (loop time), ProtocolError or ConnectionLost when the process broke the wire."""
        if self.broken is not None:
            raise self.broken
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self.waiters.append(waiter)
        self.transport.write(wire.HEADER.pack(len(payload)) + payload)  # type: ignore[union-attr]
        timer = loop.call_at(deadline, _time_out, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()

    def send_batch(self, payload: bytes, futures: list[asyncio.Future[Any]]) -> None:
        """Write one frame holding a JSON list of calls; `futures` (one per call, in order) get
        their decoded replies, or fail like every call in flight when the wire breaks."""
        if self.broken is not None:
            for future in futures:
                _fail(future, self.broken)
            return
        self.waiters.extend(futures)
        self.transport.write(wire.HEADER.pack(len(payload)) + payload)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self._break(ConnectionLost("the session socket was closed"))

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= wire.HEADER.size and self.broken is None:
            (length,) = wire.HEADER.unpack_from(self.buffer)
            if length > self.frame_limit:
                self._break(wire.ProtocolError(f"sent a reply of {length} bytes; the limit is {self.frame_limit}"))
                return
            end = wire.HEADER.size + length
            if len(self.buffer) < end:
                return
            payload = bytes(self.buffer[wire.HEADER.size:end])
            del self.buffer[:end]
            self._deliver(payload)

    def _deliver(self, payload: bytes) -> None:
        """Resolve the oldest calls with a reply frame: a list answers as many calls as it holds
        (decoded), anything else one call (its raw payload)."""
        if payload[:1] != b"[":
            replies: list[Any] = [payload]
        else:
            try:
                replies = wire.decode(payload)
            except wire.ProtocolError as error:
                self._break(error)
                return
        for reply in replies:
            if not self.waiters:
                self._break(wire.ProtocolError("sent a reply to no request"))
                return
            waiter = self.waiters.popleft()
            if not waiter.done():  # done: its caller gave up (the reply is dropped)
                waiter.set_result(reply)
            if self.on_reply is not None:
                self.on_reply()

    def eof_received(self) -> bool:
        self._break(ConnectionLost("the game's process closed its session socket"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._break(ConnectionLost(f"the session socket broke: {exc}" if exc else
                                   "the game's process closed its session socket"))

    def _break(self, error: BaseException) -> None:
        first = self.broken is None
        if first:
            self.broken = error
        while self.waiters:
            _fail(self.waiters.popleft(), self.broken)
        if first and self.on_broken is not None:
            self.on_broken()


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
        future.exception()  # retrieved: its caller may have gone


def _time_out(waiter: asyncio.Future[bytes]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


@dataclass(eq=False, kw_only=True)
class GameProcess:
    """A live game process: its pid, session socket, output and the future of its wait status
    (None: unknown, the fork server is gone). `owner_key` names whose sessions it may serve
    (() = none but the one it was forked for)."""

    pid: int
    connection: GameConnection
    output: GameOutput
    exited: asyncio.Future[int | None]
    owner_key: tuple[str, ...] = ()

    @property
    def alive(self) -> bool:
        return not self.exited.done() and self.connection.broken is None

    def close_ends(self) -> None:
        """Close our socket end and output pipe (once the process is reaped, or being killed)."""
        self.connection.close()
        self.output.close()
