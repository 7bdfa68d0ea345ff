"""Run the local stack through the real CLI (`opentinker up/down`) on free ports.

Set HARNESS_STACK_LOG to a file's path to count stacks: every `LocalStack.up`, every
`ChaosStack.up` and every other `run_cli("up", ...)` appends one JSON line to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from opentinker.client.tls import ClientTls
from harness.stack_spec import DEFAULT, StackSpec

CLI = [sys.executable, "-m", "opentinker.cli.main"]
SERVICES = ("scheduler", "trainer", "rollout", "envhost", "coordinator")
STACK_LOG_ENV = "HARNESS_STACK_LOG"


def run_cli(*args: str, timeout: float = 90, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    if args[:1] == ("up",):
        record_start("cli-up", " ".join(args[1:3]))
    return _cli(*args, timeout=timeout, env=env)


def _cli(*args: str, timeout: float, env: dict[str, str] | None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def record_start(kind: str, what: str) -> None:
    """One line in $HARNESS_STACK_LOG (when set) for a stack about to start."""
    if path := os.environ.get(STACK_LOG_ENV):
        line = {"time": round(time.time(), 3), "pid": os.getpid(), "kind": kind, "what": what,
                "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
        with open(path, "a") as log:
            log.write(json.dumps(line) + "\n")


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
    """`opentinker up` of `spec` in a private state dir; `address(name)` of each service; `down()`."""

    def __init__(self, state_dir: Path, spec: StackSpec = DEFAULT) -> None:
        self.state_dir = state_dir
        self.spec = spec
        ports = free_ports(len(SERVICES) + 3)
        self.ports = dict(zip(SERVICES, ports, strict=False))
        self.redis_port, self.dashboard_port, self.gateway_port = ports[-3:]

    @property
    def dashboard(self) -> bool:
        return self.spec.dashboard

    @property
    def gateway(self) -> bool:
        return self.spec.gateway

    def up(self, timeout: float = 120) -> None:
        """`opentinker up` with the spec's settings in its environment, allowed `timeout` s in
        all (a busy machine imports torch slowly)."""
        dashboard = ["--dashboard-port", str(self.dashboard_port)] if self.dashboard else ["--no-dashboard"]
        gateway = ["--gateway-port", str(self.gateway_port)] if self.gateway else ["--no-gateway"]
        record_start("local", f"{self.spec.name} {self.state_dir}")
        tls = ["--tls", self.spec.tls] if self.spec.tls != "off" else []
        result = _cli("up", "--state-dir", str(self.state_dir), "--redis-port", str(self.redis_port),
                      *dashboard, *gateway, *tls, *port_args(self.ports), "--json", "--timeout", str(timeout - 10),
                      timeout=timeout, env=self.spec.environment())
        if result.returncode != 0:
            raise RuntimeError(f"opentinker up failed ({result.returncode}):\n{result.stderr}\n{self.logs()}")
        self.status = json.loads(result.stdout)

    @property
    def client_tls(self) -> ClientTls | None:
        """How a client dials this stack: None without TLS; the stack's CA (and, when mutual,
        its certificate) from the state dir."""
        if self.spec.tls == "off":
            return None
        tls = self.state_dir / "tls"
        mine = {"cert_file": str(tls / "stack.pem"), "key_file": str(tls / "stack.key")} if self.spec.tls == "mutual" else {}
        return ClientTls(ca_file=str(tls / "ca.pem"), **mine)

    @property
    def api_key(self) -> str:
        """The stack's admin key (`opentinker up` writes it to <state-dir>/admin.key)."""
        return (self.state_dir / "admin.key").read_text().strip()

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    @property
    def gateway_url(self) -> str:
        """The Tinker gateway `opentinker up` started (a spec with gateway=True)."""
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

    def gone(self) -> list[str]:
        """The processes `up` started that no longer run (a test killed one, or one crashed)."""
        return [p["name"] for p in getattr(self, "status", {}).get("processes", [])
                if p.get("pid") and not pid_running(p["pid"])]

    def __enter__(self) -> "LocalStack":
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


@contextlib.contextmanager
def second_service(local: LocalStack, name: str) -> Iterator[tuple[str, dict[str, int]]]:
    """Start one more `name` process on the stack (its own port and log, same Redis, Scheduler,
    checkpoints and spec settings); yields (its address, {address: pid} of the stack's and this one's)."""
    from opentinker.cli.topology import SERVICES as DEFS
    from opentinker.cli.topology import service_env

    port = free_ports(1)[0]
    service = next(s for s in DEFS if s.name == name)
    env = service_env(service, host="127.0.0.1", ports={**local.ports, name: port},
                      redis_url=f"redis://127.0.0.1:{local.redis_port}/0",
                      checkpoint_dir=str(local.state_dir / "checkpoints"), api_key=local.api_key)
    address = f"127.0.0.1:{port}"
    with (local.state_dir / "logs" / f"{name}-2.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", service.module], env={**local.spec.environment(), **env},
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        stacked = next(p["pid"] for p in local.status["processes"] if p["name"] == name)
        try:
            yield address, {local.address(name): stacked, address: process.pid}
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def pid_running(pid: int) -> bool:
    """True if `pid` exists and is not a zombie (a reaped-later child counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def stack_pids(state_dir: Path) -> list[int]:
    """Every running process of the stack in state_dir, found without trusting stack.json:
    services carry OPENTINKER_STACK_DIR in their environment; redis-server rewrites that
    memory (its process title) but runs with its data dir, state_dir/redis, as cwd."""
    marker = f"OPENTINKER_STACK_DIR={state_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        ours = marker in environ or cwd == str(state_dir / "redis")
        if ours and pid_running(int(entry.name)):
            found.append(int(entry.name))
    return found
