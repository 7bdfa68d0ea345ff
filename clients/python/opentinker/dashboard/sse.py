"""Server-Sent Events: message framing, where a stream starts, and a writer two threads share.

A frame is `event:` (optional), `id:` (the JobEvent's sequence), one `data:` line of JSON and a
blank line. A client that reconnects sends the last id it saw as `Last-Event-ID`; the stream
resumes after it. While no event comes, a comment line every `keepalive_seconds` keeps proxies
from closing the connection and tells the server when the client is gone.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from opentinker.dashboard.errors import ApiError, bad_request

KEEPALIVE_FRAME = b": keep-alive\n\n"
RECONNECT_MILLISECONDS = 1000


def sse_frame(data: Any, *, event_id: int | None = None, event: str | None = None) -> bytes:
    lines = [f"event: {event}"] if event else []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), allow_nan=False))
    return ("\n".join(lines) + "\n\n").encode()


def retry_frame(milliseconds: int = RECONNECT_MILLISECONDS) -> bytes:
    return f"retry: {milliseconds}\n\n".encode()


def start_sequence(last_event_id: str | None, after_sequence: str | None) -> int:
    """Where a stream starts: after the `Last-Event-ID` header (a reconnect), else after the
    `after_sequence` query parameter (a first connect that already holds the history), else 0."""
    for name, raw in (("Last-Event-ID", last_event_id), ("after_sequence", after_sequence)):
        if raw is None or raw.strip() == "":
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            raise bad_request(f"{name} must be an event sequence number, got {raw!r}") from None
        if value < 0:
            raise bad_request(f"{name} must be >= 0, got {value}")
        return value
    return 0


class SseWriter:
    """Writes frames to one response from the event thread and a keep-alive thread. The first
    failed write (the client went away) marks it closed and calls `on_close` once."""

    def __init__(self, sink: BinaryIO, *, on_close: Callable[[], None], keepalive_seconds: float) -> None:
        self.sink = sink
        self.on_close = on_close
        self.keepalive_seconds = keepalive_seconds
        self.closed = False
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._keepalive = threading.Thread(target=self._send_keepalives, name="sse-keepalive", daemon=True)

    def start(self) -> None:
        self._keepalive.start()

    def stop(self) -> None:
        self._stopped.set()

    def send(self, frame: bytes) -> bool:
        """False once the client is gone."""
        with self._lock:
            if self.closed:
                return False
            try:
                self.sink.write(frame)
                self.sink.flush()
                return True
            except OSError:  # BrokenPipeError, ConnectionResetError, a socket timeout
                self.closed = True
        self.on_close()
        return False

    def _send_keepalives(self) -> None:
        while not self._stopped.wait(self.keepalive_seconds):
            if not self.send(KEEPALIVE_FRAME):
                return


def error_frame(error: ApiError) -> bytes:
    """A failure after the stream started (the HTTP status was already sent)."""
    return sse_frame(error.body(), event="failure")
