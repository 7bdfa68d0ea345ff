"""A local stack built for fault injection: every process can be killed with SIGKILL and
started again with the same command and environment (what a supervisor such as compose's
`restart: unless-stopped` does), Redis restarts from its append-only file, and every
service-to-service connection runs through a `Proxy` that can cut it.

Each service binds its real port; everything else (peers' addresses, the address it
advertises to the Scheduler) names the service's proxy port, so every call between
processes crosses a proxy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from opentinker.cli.health_probe import SERVING, check_health
from opentinker.cli.topology import SERVICES, service_env
from opentinker.client.credentials import ensure_admin_key
from opentinker_runtime.core.embedded_redis import redis_server_command
from harness.chaos.proxy import ProxyLoop
from harness.stack import free_ports, record_start

HOST = "127.0.0.1"
SERVICE_NAMES = tuple(s.name for s in SERVICES)

FAST_RECOVERY_ENV = {
    # workers heartbeat every second (a cancelled or re-queued run stops within ~1 s); the worker
    # TTL keeps its default (10 s), which a Scheduler restart must not outlast: a longer outage
    # expires every worker's registration in Redis and re-queues every running job
    "OPENTINKER_SCHEDULER_HEARTBEAT_INTERVAL_SECONDS": "1",
    "OPENTINKER_SCHEDULER_REDIS_CHECK_SECONDS": "0.5",
}


@dataclass
class Process:
    name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen | None = None
    starts: int = 0
    kills: int = 0
    peak_mib: float = 0.0
    """Highest resident memory of any of its incarnations (VmHWM), as far as read."""

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL (no shutdown hooks run), then reap."""
        assert self.popen is not None
        self.read_peak()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)
        self.kills += 1

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def read_peak(self) -> float:
        """Fold this incarnation's VmHWM into `peak_mib`."""
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_mib = max(self.peak_mib, int(line.split()[1]) / 1024)
        return self.peak_mib

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=15)


class ChaosStack:
    """Redis + the five services, each restartable, with proxies on every service port."""

    def __init__(self, state_dir: Path, *, extra_env: dict[str, str] | None = None) -> None:
        self.state_dir = state_dir
        (state_dir / "logs").mkdir(parents=True, exist_ok=True)
        ports = free_ports(2 * len(SERVICE_NAMES) + 1)
        self.redis_port = ports[0]
        self.real_ports = dict(zip(SERVICE_NAMES, ports[1:6], strict=True))
        self.proxy_ports = dict(zip(SERVICE_NAMES, ports[6:], strict=True))
        self.api_key = ensure_admin_key(state_dir)
        self.checkpoint_dir = state_dir / "checkpoints"
        self.proxies = ProxyLoop()
        self.processes: dict[str, Process] = {"redis": self._redis_process()}
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
        for service in SERVICES:
            env = clean | {"PYTHONUNBUFFERED": "1"} | FAST_RECOVERY_ENV | (extra_env or {}) | service_env(
                service, host=HOST, ports=self.proxy_ports, redis_url=self.redis_url,
                checkpoint_dir=str(self.checkpoint_dir), api_key=self.api_key)
            env[f"{service.env_prefix}PORT"] = str(self.real_ports[service.name])  # bind the real port
            self.processes[service.name] = Process(service.name, [sys.executable, "-m", service.module], env,
                                                   state_dir / "logs" / f"{service.name}.log")

    @property
    def redis_url(self) -> str:
        return f"redis://{HOST}:{self.redis_port}/0"

    def address(self, name: str) -> str:
        """Where clients reach `name`: through its proxy, like the services do."""
        return f"{HOST}:{self.proxy_ports[name]}"

    def up(self, timeout: float = 120) -> None:
        record_start("chaos", str(self.state_dir))
        for name in SERVICE_NAMES:
            self.proxies.add(name, self.proxy_ports[name], self.real_ports[name])
        self.processes["redis"].start()
        self.wait_ready("redis", timeout)
        for name in SERVICE_NAMES:
            self.processes[name].start()
        for name in SERVICE_NAMES:
            self.wait_ready(name, timeout)

    def kill(self, name: str) -> None:
        self.processes[name].kill()

    def restart(self, name: str, timeout: float = 90) -> None:
        self.processes[name].start()
        self.wait_ready(name, timeout)

    def wait_ready(self, name: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready(name):
            process = self.processes[name]
            if process.popen is not None and process.popen.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.popen.returncode}:\n{self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {timeout:g}s:\n{self.log_tail(name)}")
            time.sleep(0.1)

    def drop_connections(self, name: str) -> int:
        """Cut every open connection to `name` (callers see UNAVAILABLE and reconnect)."""
        return self.proxies.drop_all(name)

    def log_tail(self, name: str, lines: int = 40) -> str:
        text = self.processes[name].log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def alive(self) -> dict[str, bool]:
        """Whether each process is running now (a service that crashed on its own is not)."""
        return {name: process.alive() for name, process in self.processes.items()}

    def peak_rss_mib(self) -> dict[str, float]:
        return {name: round(process.read_peak(), 1) for name, process in self.processes.items()}

    def down(self) -> None:
        for name in reversed(SERVICE_NAMES):
            self.processes[name].stop()
        self.processes["redis"].stop()
        self.proxies.close()

    def _redis_process(self) -> Process:
        data_dir = self.state_dir / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        command = [str(c) for c in redis_server_command(self.redis_port, data_dir, appendonly=True)]
        command += ["--logfile", ""]
        return Process("redis", command, dict(os.environ), self.state_dir / "logs" / "redis.log")

    def _ready(self, name: str) -> bool:
        if name == "redis":
            client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=0.5, socket_timeout=0.5)
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False
            finally:
                client.close()
        return check_health(f"{HOST}:{self.real_ports[name]}", timeout=1.0) == SERVING
