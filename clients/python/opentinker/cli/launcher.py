"""One `opentinker up`: start redis-server and the services detached, record each in
stack.json as soon as it exists, and wait until everything is SERVING."""

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
import structlog

from opentinker.cli import procs, state
from opentinker.cli.errors import StartFailed
from opentinker.cli.health_probe import SERVING, check_health
from opentinker.cli.state import ProcessRecord, StackRecord
from opentinker.cli.topology import REDIS, SERVICES, connect_host, service_env
from opentinker.client.credentials import ensure_admin_key

log = structlog.get_logger("opentinker.cli")

LOG_TAIL_LINES = 30
STACK_DIR_ENV = "OPENTINKER_STACK_DIR"
"""Set in every process of a stack to its state directory (find strays via /proc/*/environ)."""

Progress = Callable[[str, str, str, float], None]
"""progress(name, address, status, seconds_since_start), called as each process gets ready."""


@dataclass(frozen=True, kw_only=True)
class UpConfig:
    state_dir: Path
    host: str
    """Address the services bind."""
    ports: dict[str, int]
    """gRPC port per service name."""
    port_flags: dict[str, str]
    """How the user changes each port (for error messages), by service name and `redis`."""
    redis_port: int
    redis_url: str | None
    """An external redis to use instead of starting the embedded one."""
    timeout: float
    """Seconds from the first start until everything must be SERVING."""


class Launcher:
    """Starts the processes of one `up`; `stop_all` undoes whatever part of it happened."""

    def __init__(self, config: UpConfig):
        self.config = config
        self.started_at = time.monotonic()
        self.deadline = self.started_at + config.timeout
        redis_url = config.redis_url or f"redis://127.0.0.1:{config.redis_port}/0"
        self.record = StackRecord(host=config.host, redis_url=redis_url,
                                  redis_external=config.redis_url is not None)
        self.popens: dict[str, subprocess.Popen] = {}
        self.log_offsets: dict[str, int] = {}
        self.api_key = ensure_admin_key(config.state_dir)

    def launch_all(self, progress: Progress) -> None:
        if self.config.redis_url is None:
            self._start_redis()
            self._wait_redis(progress)
        for service in SERVICES:
            env = self._base_env() | service_env(service, host=self.config.host,
                                                 ports=self.config.ports,
                                                 redis_url=self.record.redis_url,
                                                 checkpoint_dir=str(self.config.state_dir / "checkpoints"),
                                                 api_key=self.api_key)
            address = f"{connect_host(self.config.host)}:{self.config.ports[service.name]}"
            self._start(service.name, [sys.executable, "-m", service.module], env, address)
        self._wait_services(progress)

    def stop_all(self) -> None:
        """Stop services, then redis, and forget the stack."""
        services = [p.ref for p in self.record.processes if p.name != REDIS]
        backing = [p.ref for p in self.record.processes if p.name == REDIS]
        procs.stop(services, timeout=10.0)
        procs.stop(backing, timeout=10.0)
        for popen in self.popens.values():
            popen.poll()
        state.remove(self.config.state_dir)

    # ------------------------------------------------------------ starting

    def _base_env(self) -> dict[str, str]:
        """Our environment, unbuffered, plus a marker naming the stack each process belongs to."""
        return {**os.environ, "PYTHONUNBUFFERED": "1", STACK_DIR_ENV: str(self.config.state_dir)}

    def _start(self, name: str, command: list[str], env: dict[str, str], address: str) -> None:
        log_path = self._log_path(name)
        self.log_offsets[name] = log_path.stat().st_size if log_path.exists() else 0
        popen = procs.start_detached(command, env=env, log_path=log_path)
        self.popens[name] = popen
        self.record.processes.append(ProcessRecord(
            name=name, address=address, pid=popen.pid, start_ticks=procs.start_ticks(popen.pid),
            command=command, log=str(log_path.relative_to(self.config.state_dir)),
        ))
        state.save(self.config.state_dir, self.record)
        log.debug("started", name=name, pid=popen.pid, command=command)

    def _start_redis(self) -> None:
        from opentinker.core.embedded_redis import redis_server_command

        data_dir = self.config.state_dir / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        port = self.config.redis_port
        command = [str(c) for c in redis_server_command(port, data_dir, appendonly=True)]
        command += ["--logfile", ""]  # the last setting wins: log to stdout, i.e. logs/redis.log
        self._start(REDIS, command, self._base_env(), f"127.0.0.1:{port}")

    # ------------------------------------------------------------ waiting

    def _wait_redis(self, progress: Progress) -> None:
        client = redis.Redis.from_url(self.record.redis_url, socket_connect_timeout=0.5,
                                      socket_timeout=0.5)
        try:
            while not _pings(client):
                self._fail_if_exited(REDIS)
                self._fail_if_late([REDIS])
                time.sleep(0.05)
        finally:
            client.close()
        progress(REDIS, self._address(REDIS), SERVING, time.monotonic() - self.started_at)

    def _wait_services(self, progress: Progress) -> None:
        pending = [s.name for s in SERVICES]
        while pending:
            for name in list(pending):
                self._fail_if_exited(name)
                budget = max(0.2, min(1.0, self.deadline - time.monotonic()))
                if check_health(self._address(name), timeout=budget) == SERVING:
                    pending.remove(name)
                    elapsed = time.monotonic() - self.started_at
                    progress(name, self._address(name), SERVING, elapsed)
            if pending:
                self._fail_if_late(pending)
                time.sleep(0.1)

    def _fail_if_exited(self, name: str) -> None:
        code = self.popens[name].poll()
        if code is not None:
            raise StartFailed(f"{name} exited with code {code} during start-up",
                              {name: self._log_tail(name)})

    def _fail_if_late(self, pending: list[str]) -> None:
        if time.monotonic() >= self.deadline:
            raise StartFailed(f"not SERVING after {self.config.timeout:g}s: {', '.join(pending)}",
                              {name: self._log_tail(name) for name in pending})

    # ------------------------------------------------------------ helpers

    def _address(self, name: str) -> str:
        return next(p.address for p in self.record.processes if p.name == name)

    def _log_path(self, name: str) -> Path:
        return self.config.state_dir / "logs" / f"{name}.log"

    def _log_tail(self, name: str) -> str:
        """The last lines this run wrote to the process's log."""
        try:
            with open(self._log_path(name), "rb") as log_file:
                log_file.seek(self.log_offsets.get(name, 0))
                text = log_file.read().decode(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
