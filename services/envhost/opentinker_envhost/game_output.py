"""What a sandboxed game prints: read off its pipe, logged as structured lines, bounded.

A game process's fd 1 and 2 write into one pipe; `GameOutput` drains it on the event loop (so
the game never blocks on a full pipe) and logs each line as a `game_output` event with the
session id: a line is clipped to MAX_LINE_CHARS, and a session logs no further line in a
WINDOW_S window once LOG_BYTES_PER_WINDOW characters were logged in it; the rest is read all
the same (the game never blocks on its output) and only counted, and the count is logged
(`game_output_dropped`) when the window ends or the session closes. The last TAIL_BYTES are
kept whatever was logged: they explain a process that died.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable

import structlog

from opentinker_runtime.edge.errors import clip_middle

MAX_LINE_CHARS = 1000
LOG_BYTES_PER_WINDOW = 16 * 1024
WINDOW_S = 10.0
TAIL_BYTES = 2000
READ_BYTES = 64 * 1024
MAX_DRAIN_AT_CLOSE = 1 << 20

log = structlog.get_logger(__name__)


class GameOutput:
    """Reads one game process's output pipe until its end or `close()`."""

    def __init__(self, fd: int, *, session_id: str, env_name: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.fd = fd
        self.session_id = session_id
        self.env_name = env_name
        self.clock = clock
        self.partial = b""
        self.tail = b""
        self.window_start = clock()
        self.window_bytes = 0
        self.dropped_bytes = 0
        self.loop = asyncio.get_running_loop()
        os.set_blocking(fd, False)
        self.loop.add_reader(fd, self._readable)
        self.reading = True

    def tail_text(self) -> str:
        """The last output, as text."""
        return self.tail.decode("utf-8", "replace")

    def close(self) -> None:
        """Read what is left (bounded), log the last partial line and the drop count, close."""
        if self.fd < 0:
            return
        self._finish()
        self._stop_reading()
        os.close(self.fd)
        self.fd = -1

    def next_session(self, session_id: str) -> None:
        """What follows belongs to `session_id` (a warm process's next session); `end_session`
        came before."""
        self.session_id = session_id

    def end_session(self) -> None:
        """The session ended and its process is kept: log what it left in the pipe (the game
        flushed before answering close) under its id, and start a new tail."""
        self._finish()
        self.tail = b""
        self.session_id = ""

    def _finish(self) -> None:
        drained = 0
        while self.reading and drained < MAX_DRAIN_AT_CLOSE and (chunk := self._read_once()):
            drained += len(chunk)
        if self.partial:
            self._emit(self.partial)
            self.partial = b""
        self._report_dropped()

    def _readable(self) -> None:
        self._read_once()

    def _read_once(self) -> bytes | None:
        """One chunk, fed to the log; b"" at the end of the pipe, None when nothing is there."""
        try:
            chunk = os.read(self.fd, READ_BYTES)
        except BlockingIOError:
            return None
        except OSError:
            chunk = b""
        if chunk:
            self.feed(chunk)
        else:
            self._stop_reading()
        return chunk

    def _stop_reading(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False

    def feed(self, chunk: bytes) -> None:
        """Log the complete lines of `chunk` (with what came before it) within the budget."""
        self.tail = (self.tail + chunk)[-TAIL_BYTES:]
        self._roll_window()
        if self.window_bytes >= LOG_BYTES_PER_WINDOW:  # over budget: only count, cheaply
            self.dropped_bytes += len(chunk)
            self.partial = b""
            return
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > MAX_LINE_CHARS * 4:  # no newline in sight: log it as a line
            lines.append(self.partial)
            self.partial = b""
        for line in lines:
            self._emit(line)

    def _emit(self, raw: bytes) -> None:
        if self.window_bytes >= LOG_BYTES_PER_WINDOW:
            self.dropped_bytes += len(raw) + 1
            return
        text = clip_middle(raw.decode("utf-8", "replace").rstrip("\r"), MAX_LINE_CHARS)
        self.window_bytes += len(text) + 1
        log.info("game_output", session_id=self.session_id, env_name=self.env_name, line=text)

    def _roll_window(self) -> None:
        if self.clock() - self.window_start >= WINDOW_S:
            self._report_dropped()
            self.window_start, self.window_bytes = self.clock(), 0

    def _report_dropped(self) -> None:
        if self.dropped_bytes:
            log.warning("game_output_dropped", session_id=self.session_id, env_name=self.env_name,
                        dropped_bytes=self.dropped_bytes, limit_bytes=LOG_BYTES_PER_WINDOW,
                        window_s=WINDOW_S)
            self.dropped_bytes = 0


def close_quietly(output: GameOutput | None) -> None:
    if output is not None:
        with contextlib.suppress(OSError):
            output.close()
