"""Run the local stack through the real CLI (`opentinker up/down`) on free ports."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

CLI = [sys.executable, "-m", "opentinker.cli.main"]
SERVICES = ("scheduler", "trainer", "rollout", "envhost", "coordinator")


def run_cli(*args: str, timeout: float = 90, env: dict[str, str] | None = None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def free_ports(count: int) -> list[int]:
    """Distinct ports the OS reports free right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_args(ports: dict[str, int]) -> list[str]:
    return [arg for name, port in ports.items() for arg in (f"--{name}-port", str(port))]


class LocalStack:
    """`opentinker up` in a private state dir; `address(name)` of each service; `down()`."""

    def __init__(self, state_dir: Path, *, dashboard: bool = True, gateway: bool = False) -> None:
        self.state_dir = state_dir
        ports = free_ports(len(SERVICES) + 3)
        self.ports = dict(zip(SERVICES, ports, strict=False))
        self.redis_port, self.dashboard_port, self.gateway_port = ports[-3:]
        self.dashboard = dashboard
        self.gateway = gateway

    def up(self, timeout: float = 120) -> None:
        """`opentinker up`, allowed `timeout` s in all (a busy machine imports torch slowly)."""
        dashboard = ["--dashboard-port", str(self.dashboard_port)] if self.dashboard else ["--no-dashboard"]
        gateway = ["--gateway-port", str(self.gateway_port)] if self.gateway else ["--no-gateway"]
        result = run_cli("up", "--state-dir", str(self.state_dir), "--redis-port", str(self.redis_port),
                         *dashboard, *gateway, *port_args(self.ports), "--json", "--timeout", str(timeout - 10),
                         timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"opentinker up failed ({result.returncode}):\n{result.stderr}\n{self.logs()}")
        self.status = json.loads(result.stdout)

    @property
    def api_key(self) -> str:
        """The stack's admin key (`opentinker up` writes it to <state-dir>/admin.key)."""
        return (self.state_dir / "admin.key").read_text().strip()

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    @property
    def gateway_url(self) -> str:
        """The Tinker gateway `opentinker up` started (LocalStack(gateway=True))."""
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def dashboard_url(self) -> str:
        """The web dashboard `opentinker up` started (it acts with the stack's admin key)."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    def logs(self) -> str:
        logs = sorted((self.state_dir / "logs").glob("*.log")) if (self.state_dir / "logs").is_dir() else []
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)

    def down(self) -> None:
        run_cli("down", "--state-dir", str(self.state_dir), timeout=60)

    def __enter__(self) -> "LocalStack":
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


@contextlib.contextmanager
def second_service(local: LocalStack, name: str) -> Iterator[tuple[str, dict[str, int]]]:
    """Start one more `name` process on the stack (its own port and log, same Redis, Scheduler
    and checkpoints); yields (its address, {address: pid} of the stack's and this one's)."""
    from opentinker.cli.topology import SERVICES as DEFS
    from opentinker.cli.topology import service_env

    port = free_ports(1)[0]
    service = next(s for s in DEFS if s.name == name)
    env = service_env(service, host="127.0.0.1", ports={**local.ports, name: port},
                      redis_url=f"redis://127.0.0.1:{local.redis_port}/0",
                      checkpoint_dir=str(local.state_dir / "checkpoints"), api_key=local.api_key)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    address = f"127.0.0.1:{port}"
    with (local.state_dir / "logs" / f"{name}-2.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", service.module], env={**clean, **env},
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        stacked = next(p["pid"] for p in local.status["processes"] if p["name"] == name)
        try:
            yield address, {local.address(name): stacked, address: process.pid}
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
