"""The dashboard as its own process (`python -m opentinker.dashboard`), and small HTTP clients
for its JSON API and event streams (stdlib only)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

STARTUP_SECONDS = 30


class DashboardProcess:
    """Starts on a free port (--port 0) and reads its URL from the line it prints."""

    def __init__(self, scheduler: str, *, api_key: str, log_path: Path, cwd: Path,
                 entry: tuple[str, ...] = ("-m", "opentinker.dashboard")) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
        if api_key:
            env["OPENTINKER_API_KEY"] = api_key
        self.log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, *entry, "--scheduler", scheduler, "--port", "0"],
            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        self.url = self._read_url()

    def _read_url(self) -> str:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(self.process.stdout.readline().decode()), daemon=True)
        reader.start()
        reader.join(STARTUP_SECONDS)
        if not lines or not lines[0].startswith("dashboard: "):
            self.process.kill()
            raise RuntimeError(f"the dashboard did not start: {lines!r}, exit {self.process.poll()}")
        return lines[0].removeprefix("dashboard: ").strip()

    def terminate(self, timeout: float = 10) -> int:
        """SIGTERM, then the exit code (SIGKILL and AssertionError if it does not stop in time)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"the dashboard ignored SIGTERM for {timeout}s") from None
        finally:
            self.log.close()


def connection(base_url: str, timeout: float = 30) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)


def request(base_url: str, method: str, path: str, *, headers: dict[str, str] | None = None,
            body: Any = None) -> tuple[int, Any]:
    """(status, parsed JSON body)."""
    conn = connection(base_url)
    try:
        payload = None if body is None else json.dumps(body).encode()
        all_headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn.request(method, path, body=payload, headers={**all_headers, **(headers or {})})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def get(base_url: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    return request(base_url, "GET", path, **kwargs)


@dataclass
class Frame:
    event: str
    id: int | None
    data: Any


class EventStreamReader:
    """An open text/event-stream response, read one frame at a time."""

    def __init__(self, base_url: str, path: str, *, headers: dict[str, str] | None = None,
                 timeout: float = 30) -> None:
        self.conn = connection(base_url, timeout)
        self.conn.request("GET", path, headers={"Accept": "text/event-stream", **(headers or {})})
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.content_type = self.response.getheader("Content-Type", "")

    def next_frame(self) -> Frame | None:
        """The next frame with data (comments and retry lines skipped); None at the end."""
        event, event_id, data = "message", None, []
        while True:
            line = self.response.fp.readline()
            if not line:
                return None
            text = line.decode().rstrip("\n")
            if text == "":
                if data:
                    return Frame(event, event_id, json.loads("\n".join(data)))
                event, event_id = "message", None
                continue
            field, _, value = text.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                event = value
            elif field == "id":
                event_id = int(value)
            elif field == "data":
                data.append(value)

    def frames_until_end(self) -> list[Frame]:
        """Every frame up to and including `end` (or the stream's close)."""
        frames = []
        while (frame := self.next_frame()) is not None:
            frames.append(frame)
            if frame.event == "end":
                break
        return frames

    def close(self) -> None:
        """Close the socket for real (the response holds its own reference to it)."""
        self.response.close()
        self.conn.close()
