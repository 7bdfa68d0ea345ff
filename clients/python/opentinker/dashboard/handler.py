"""The HTTP side: one request per call of a handler method; JSON in and out, SSE, static files.

Every failure before a response starts is a JSON body {"code", "message"} with the HTTP status
of its gRPC code (errors.py); a failure inside an event stream is a `failure` event.
"""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import structlog

from opentinker.dashboard import api
from opentinker.dashboard.downloads import CorruptDownload, download_name, write_single, write_tar
from opentinker.dashboard.errors import ApiError, bad_request, not_found
from opentinker.dashboard.guards import caller_key, check_host, check_post
from opentinker.dashboard.routes import MethodNotAllowed, resolve
from opentinker.dashboard.sse import SseWriter, error_frame, retry_frame, sse_frame, start_sequence
from opentinker.dashboard.views import event_view, job_view

if TYPE_CHECKING:
    from opentinker.dashboard.server import DashboardServer

log = structlog.get_logger("opentinker.dashboard")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8"}
MAX_BODY_BYTES = 64 * 1024
IDLE_CONNECTION_SECONDS = 120


class DashboardHandler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"
    timeout = IDLE_CONNECTION_SECONDS
    server_version = "OpenTinkerDashboard/1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        started = time.monotonic()
        url = urlsplit(self.path)
        self.query = dict(parse_qsl(url.query))
        self.status = 0
        try:
            check_host(self.headers.get("Host"), self.server.bind_host)
            match = resolve(method, url.path)
            if match is None:
                raise not_found(f"no such page or API: {url.path}")
            getattr(self, f"serve_{match.handler}")(**match.params)
        except MethodNotAllowed as error:
            self.send_json(405, {"code": "METHOD_NOT_ALLOWED", "message": f"use {error}"},
                           extra_headers={"Allow": str(error)})
        except ApiError as error:
            self.close_connection = self.close_connection or method == "POST"  # maybe an unread body
            self.send_json(error.http_status, error.body())
        log.info("http_request", method=method, path=url.path, status=self.status,
                 duration_ms=round((time.monotonic() - started) * 1000, 1))

    @property
    def api_key(self) -> str:
        return caller_key(self.headers.get("Authorization"), self.server.default_api_key)

    # --- responses -------------------------------------------------------------------------

    def send_json(self, status: int, body: Any, *, extra_headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
        self.send_bytes(status, payload, "application/json", extra_headers)

    def send_bytes(self, status: int, payload: bytes, content_type: str,
                   extra_headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Requests are logged once, structured, by _dispatch (never with their headers)."""

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        log.warning("http_error", client=self.client_address[0], message=format % args)

    # --- routes ----------------------------------------------------------------------------

    def serve_healthz(self) -> None:
        self.send_json(200, {"status": "ok", "scheduler": self.server.gateway.address,
                             "open_event_streams": self.server.open_stream_count()})

    def serve_page(self) -> None:
        self.serve_static_file("index.html")

    def serve_static_file(self, name: str) -> None:
        path = self.server.static_dir / name
        if not path.is_file():
            raise not_found(f"no static file {name}")
        self.send_bytes(200, path.read_bytes(), CONTENT_TYPES[path.suffix])

    def serve_list_jobs(self) -> None:
        self.send_json(200, api.list_jobs(self.server.gateway, self.api_key, self.query))

    def serve_get_job(self, job_id: str) -> None:
        self.send_json(200, api.get_job(self.server.gateway, self.api_key, job_id))

    def serve_job_metrics(self, job_id: str) -> None:
        self.send_json(200, api.job_metrics(self.server.gateway, self.api_key, job_id))

    def serve_job_samples(self, job_id: str) -> None:
        self.send_json(200, api.job_samples(self.server.gateway, self.api_key, job_id, self.query))

    def serve_job_artifacts(self, job_id: str) -> None:
        self.send_json(200, api.job_artifacts(self.server.gateway, self.api_key, job_id))

    def serve_download_artifact(self) -> None:
        """?id=<artifact id>[&path=<directory>]: one file as itself, several as a tar stream."""
        artifact_id, prefix = self.query.get("id", ""), self.query.get("path", "").strip("/")
        files = api.artifact_files(self.server.gateway, self.api_key, artifact_id, prefix)
        stream = self.server.gateway.download(self.api_key, artifact_id, prefix)
        single = len(files) == 1
        name = download_name(artifact_id, prefix, files)
        self.status, self.close_connection = 200, True
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream" if single else "application/x-tar")
        self.send_header("Content-Disposition", f'attachment; filename="{name}"')
        if single:
            self.send_header("Content-Length", str(files[0].size_bytes))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            if single:
                write_single(stream, self.wfile)
            else:
                write_tar(stream, self.wfile)
        except (CorruptDownload, ApiError, OSError) as error:
            log.warning("download_cut_off", artifact_id=artifact_id, error=str(error))

    def serve_cancel_job(self, job_id: str) -> None:
        check_post(self.headers.get("Origin"), self.headers.get("Host"), self.headers.get("Content-Type"))
        self.send_json(200, api.cancel_job(self.server.gateway, self.api_key, job_id, self.read_json_body()))

    def serve_list_workers(self) -> None:
        self.send_json(200, api.list_workers(self.server.gateway, self.api_key))

    def serve_list_tenants(self) -> None:
        self.send_json(200, api.list_tenants(self.server.gateway, self.api_key))

    def serve_job_events(self, job_id: str) -> None:
        key = self.api_key
        after = start_sequence(self.headers.get("Last-Event-ID"), self.query.get("after_sequence"))
        job = self.server.gateway.get_job(key, job_id)  # an unknown job or a bad key: a JSON status
        stream = self.server.gateway.watch(key, job_id, after_sequence=after)
        self.start_event_stream()
        writer = SseWriter(self.wfile, on_close=stream.cancel, keepalive_seconds=self.server.keepalive_seconds)
        self.server.track_stream(stream)
        try:
            writer.start()
            writer.send(retry_frame())
            writer.send(sse_frame({"job": job_view(job)}, event="job"))
            self.relay_events(stream, writer, key, job_id)
        finally:
            writer.stop()
            stream.cancel()
            self.server.untrack_stream(stream)

    def start_event_stream(self) -> None:
        self.status = 200
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.send_header("X-Accel-Buffering", "no")
        self.end_headers()

    def relay_events(self, stream, writer: SseWriter, key: str, job_id: str) -> None:  # noqa: ANN001
        """Each JobEvent as a message with id = its sequence; `end` with the final job when the
        job is over (the Scheduler closes the stream); `failure` when the stream breaks."""
        try:
            for event in stream:
                if not writer.send(sse_frame(event_view(event), event_id=event.sequence)):
                    return
            if not stream.cancelled:
                writer.send(sse_frame({"job": job_view(self.server.gateway.get_job(key, job_id))}, event="end"))
        except ApiError as error:
            writer.send(error_frame(error))

    def read_json_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise bad_request(f"the body is over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            raise bad_request("the body is not JSON") from None
