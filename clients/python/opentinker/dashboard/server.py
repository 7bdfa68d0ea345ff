"""The dashboard's HTTP server: threads per request, one Scheduler gateway, a clean stop.

    server = DashboardServer(DashboardConfig(scheduler="127.0.0.1:50051", port=8080))
    server.start()          # serves on a background thread
    ...
    server.stop()           # ends open event streams, closes the socket and the channel
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

import structlog

from opentinker.dashboard.gateway import EventStream, SchedulerGateway
from opentinker.dashboard.handler import DashboardHandler

log = structlog.get_logger("opentinker.dashboard")
STATIC_DIR = Path(__file__).with_name("static")


@dataclass(frozen=True, kw_only=True)
class DashboardConfig:
    scheduler: str = "127.0.0.1:50051"
    """The Scheduler's gRPC address."""
    host: str = "127.0.0.1"
    """Address to bind; anyone who reaches it acts with `api_key` (see the package docstring)."""
    port: int = 8080
    """HTTP port; 0 picks a free one (read it back from `DashboardServer.port`)."""
    api_key: str = ""
    """Key for requests without an Authorization header; "" sends none."""
    call_timeout_seconds: float = 10.0
    """Deadline of each unary call to the Scheduler."""
    keepalive_seconds: float = 15.0
    """An event stream with nothing to send writes a comment this often."""


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, config: DashboardConfig, *, static_dir: Path = STATIC_DIR) -> None:
        super().__init__((config.host, config.port), DashboardHandler)
        self.bind_host = config.host
        self.default_api_key = config.api_key
        self.keepalive_seconds = config.keepalive_seconds
        self.static_dir = static_dir
        self.gateway = SchedulerGateway(config.scheduler, timeout=config.call_timeout_seconds)
        self._streams: set[EventStream] = set()
        self._streams_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.bind_host in ("", "0.0.0.0") else self.bind_host  # noqa: S104
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="dashboard-http", daemon=True)
        self._thread.start()
        log.info("dashboard_started", url=self.url, scheduler=self.gateway.address,
                 with_default_key=bool(self.default_api_key))

    def stop(self) -> None:
        """Stop accepting requests, end every open event stream, close the socket and channel."""
        self.shutdown()
        with self._streams_lock:
            streams = list(self._streams)
        for stream in streams:
            stream.cancel()
        self.server_close()
        self.gateway.close()
        log.info("dashboard_stopped", streams_ended=len(streams))

    def track_stream(self, stream: EventStream) -> None:
        with self._streams_lock:
            self._streams.add(stream)

    def untrack_stream(self, stream: EventStream) -> None:
        with self._streams_lock:
            self._streams.discard(stream)

    def open_stream_count(self) -> int:
        with self._streams_lock:
            return len(self._streams)

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver's signature
        log.exception("http_handler_failed", client=client_address[0])
