"""The Prometheus scrape endpoint: `GET /metrics` over plain HTTP, served from a daemon thread.

`MetricsEndpoint.start(host, port, env_var=...)` binds host:port (0 picks a free port; the
bound one is `.port`) and raises PortInUseError naming `env_var` when the port is taken;
`stop()` closes it. `/` answers a one-line pointer to `/metrics`, any other path 404.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import structlog
from prometheus_client.exposition import ThreadingWSGIServer

from opentinker_runtime.core import metrics
from opentinker_runtime.core.errors import PortInUseError

log = structlog.get_logger(__name__)

METRICS_PATH = "/metrics"
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def metrics_app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """WSGI: /metrics -> the exposition; / -> a pointer; anything else -> 404."""
    path = environ.get("PATH_INFO", "/")
    if path == METRICS_PATH:
        body = metrics.exposition()
        start_response("200 OK", [("Content-Type", metrics.CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return [body]
    status, text = ("200 OK", "OpenTinker metrics: GET /metrics\n") if path == "/" else \
        ("404 Not Found", f"no such path {path!r}; the metrics are at {METRICS_PATH}\n")
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on stderr (our logs are structured JSON)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's signature
        pass


def _server_class(host: str) -> type[ThreadingWSGIServer]:
    """The threading WSGI server with the address family `host` needs (IPv4 or IPv6)."""
    try:
        family = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    except socket.gaierror:
        family = socket.AF_INET  # binding reports the unresolvable host
    return type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})


@dataclass(kw_only=True)
class MetricsEndpoint:
    """A started /metrics server; `port` is the bound port."""

    host: str
    port: int
    _server: ThreadingWSGIServer
    _thread: threading.Thread

    @classmethod
    def start(cls, host: str, port: int, *, env_var: str) -> MetricsEndpoint:
        """Serve /metrics on host:port; PortInUseError (naming `env_var`) if it cannot bind."""
        bind_host = host.strip("[]")
        try:
            server = make_server(bind_host, port, metrics_app, server_class=_server_class(bind_host),
                                 handler_class=_QuietHandler)
        except OSError as error:
            raise PortInUseError(address=_address(host, port), env_var=env_var) from error
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                  name="metrics-http", daemon=True)
        thread.start()
        endpoint = cls(host=host, port=server.server_port, _server=server, _thread=thread)
        log.info("metrics_endpoint_started", url=endpoint.url)
        return endpoint

    @property
    def url(self) -> str:
        return f"http://{_address(self.host, self.port)}{METRICS_PATH}"

    def stop(self) -> None:
        """Stop serving and close the socket (blocks up to one poll interval)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"
