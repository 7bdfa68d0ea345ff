"""One `opentinker up`: start redis-server and the services detached, record each in
stack.json as soon as it exists, and wait until everything is SERVING. Every service also serves
Prometheus /metrics on its metrics port (explicit, or picked free here: `assign_metrics_ports`).

Each process is recorded with its command and its OPENTINKER_* environment (secrets left out), so
`start_again` can start a dead one later exactly as before: same ports, same log, same peers."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import redis
import structlog

from opentinker.cli import procs, state
from opentinker.cli.errors import NotRestartable, PortInUse, StartFailed
from opentinker.cli.health_probe import SERVING, check_health, check_http_health
from opentinker.cli.ports import port_is_free
from opentinker.cli.state import ProcessRecord, StackRecord
from opentinker.cli.topology import (AUTO_PORT, DASHBOARD, GATEWAY, REDIS, SERVICES, connect_host, gateway_env,
                                     service_env)
from opentinker.cli.local_ca import ensure_local_ca
from opentinker.client.credentials import ensure_admin_key
from opentinker.client.tls import ClientTls

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
    metrics_ports: dict[str, int] = field(default_factory=dict)
    """Prometheus /metrics port per service name; AUTO_PORT (or absent): picked free at start."""
    dashboard_port: int | None = None
    """The web dashboard's HTTP port (0: a free one); None: no dashboard."""
    gateway_port: int | None = None
    """The Tinker gateway's HTTP port (0: a free one); None: no gateway."""
    tls: str = "off"
    """OPENTINKER_TLS of every process: off, on or mutual, with the state directory's local CA
    (`local_ca`)."""


class Launcher:
    """Starts the processes of one `up` (or, given the running stack's `record`, starts some of
    its processes again); `stop_all` undoes whatever part of an `up` happened."""

    def __init__(self, config: UpConfig, record: StackRecord | None = None):
        self.config = config
        self.started_at = time.monotonic()
        self.deadline = self.started_at + config.timeout
        redis_url = config.redis_url or f"redis://127.0.0.1:{config.redis_port}/0"
        self.record = record or StackRecord(host=config.host, redis_url=redis_url,
                                            redis_external=config.redis_url is not None)
        self.popens: dict[str, subprocess.Popen] = {}
        self.log_offsets: dict[str, int] = {}
        self.api_key = ensure_admin_key(config.state_dir)
        self.tls_env = (ensure_local_ca(config.state_dir, config.host).env(config.tls)
                        if config.tls != "off" else {})
        """The TLS variables of every process of this `up` (a restart's come from its record)."""

    def launch_all(self, progress: Progress) -> None:
        metrics_ports = assign_metrics_ports(self.config)
        if self.config.redis_url is None:
            self._start_redis()
            self._wait_redis(progress)
        host = connect_host(self.config.host)
        for service in SERVICES:
            env = self._base_env() | service_env(service, host=self.config.host,
                                                 ports=self.config.ports,
                                                 redis_url=self.record.redis_url,
                                                 checkpoint_dir=str(self.config.state_dir / "checkpoints"),
                                                 api_key=self.api_key, metrics_ports=metrics_ports)
            address = f"{host}:{self.config.ports[service.name]}"
            self._start(service.name, [sys.executable, "-m", service.module], env, address,
                        metrics_address=f"{host}:{metrics_ports[service.name]}")
        self._wait_services(progress, [s.name for s in SERVICES])
        if self.config.gateway_port is not None:
            self._start_gateway(progress)
        if self.config.dashboard_port is not None:
            self._start_dashboard(progress)

    def start_again(self, processes: list[ProcessRecord], progress: Progress) -> None:
        """Start recorded processes again with their recorded command and environment (same
        ports, same logs), in the order `launch_all` uses: redis, the services, the dashboard;
        wait until each is SERVING. Raises StartFailed like `launch_all`."""
        by_name = {p.name: p for p in processes}
        if REDIS in by_name:
            self._start_recorded(by_name[REDIS])
            self._wait_redis(progress)
        services = [s.name for s in SERVICES if s.name in by_name]
        for name in services:
            self._start_recorded(by_name[name])
        self._wait_services(progress, services)
        for name in (GATEWAY, DASHBOARD):
            if name in by_name:
                self._start_recorded(by_name[name])
                self._wait_http(name, progress)

    def stop_started(self) -> None:
        """Stop the processes this launcher started (the rest of a running stack stays)."""
        started = [p.ref for p in self.record.processes if p.name in self.popens]
        procs.stop(started, timeout=10.0)
        for popen in self.popens.values():
            popen.poll()

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
        """Our environment, unbuffered, plus a marker naming the stack each process belongs to
        (and, with --tls, the TLS variables)."""
        return {**os.environ, "PYTHONUNBUFFERED": "1", STACK_DIR_ENV: str(self.config.state_dir), **self.tls_env}

    def _start(self, name: str, command: list[str], env: dict[str, str], address: str, *,
               metrics_address: str = "") -> None:
        log_path = self._log_path(name)
        self.log_offsets[name] = log_path.stat().st_size if log_path.exists() else 0
        popen = procs.start_detached(command, env=env, log_path=log_path)
        self.popens[name] = popen
        self._record(ProcessRecord(
            name=name, address=address, pid=popen.pid, start_ticks=procs.start_ticks(popen.pid),
            command=command, log=str(log_path.relative_to(self.config.state_dir)),
            metrics_address=metrics_address, env=recordable_env(env),
        ))
        log.debug("started", name=name, pid=popen.pid, command=command)

    def _record(self, process: ProcessRecord) -> None:
        """Save `process` in stack.json, in place of an earlier record of the same name."""
        processes = self.record.processes
        index = next((i for i, p in enumerate(processes) if p.name == process.name), len(processes))
        processes[index:index + 1] = [process]
        state.save(self.config.state_dir, self.record)

    def _start_recorded(self, process: ProcessRecord) -> None:
        """`process` again: its recorded command and environment over ours (minus our own
        non-secret OPENTINKER_* variables); the admin key read again from the state dir."""
        if not process.env:
            raise NotRestartable(f"{process.name} was recorded by an older opentinker without its "
                                 f"environment; restart the whole stack: `opentinker down --state-dir "
                                 f"{self.config.state_dir}` then `opentinker up`")
        inherited = {k: v for k, v in self._base_env().items()
                     if not k.startswith("OPENTINKER_") or is_secret_key(k)}
        env = inherited | process.env
        if process.name != REDIS:
            env["OPENTINKER_API_KEY"] = self.api_key
        self._start(process.name, process.command, env, process.address,
                    metrics_address=process.metrics_address)

    def _start_dashboard(self, progress: Progress) -> None:
        """The dashboard, once the Scheduler serves; it acts with the stack's admin key for
        requests that bring none (it binds the services' host: 127.0.0.1 unless told otherwise)."""
        port = self.config.dashboard_port or _free_ports(self.config.host, 1, avoid=set())[0]
        command = [sys.executable, "-m", "opentinker.dashboard", "--scheduler", self._address("scheduler"),
                   "--host", self.config.host, "--port", str(port)]
        env = self._base_env() | {"OPENTINKER_API_KEY": self.api_key}
        self._start(DASHBOARD, command, env, f"{connect_host(self.config.host)}:{port}")
        self._wait_http(DASHBOARD, progress)

    def _start_gateway(self, progress: Progress) -> None:
        """The Tinker gateway, once the Scheduler serves: a GATEWAY worker that drives the SESSION
        jobs of Tinker training clients; it binds the services' host."""
        port = self.config.gateway_port or _free_ports(self.config.host, 1, avoid=set())[0]
        address = f"{connect_host(self.config.host)}:{port}"
        env = self._base_env() | gateway_env(
            host=self.config.host, port=port, scheduler_address=self._address("scheduler"),
            redis_url=self.record.redis_url, api_key=self.api_key, advertise_address=address,
            tokenizer_dir=str(self.config.state_dir / "gateway" / "tokenizers"))
        self._start(GATEWAY, [sys.executable, "-m", "opentinker_gateway"], env, address)
        self._wait_http(GATEWAY, progress)

    def _wait_http(self, name: str, progress: Progress) -> None:
        while check_http_health(self._address(name), timeout=0.5) != SERVING:
            self._fail_if_exited(name)
            self._fail_if_late([name])
            time.sleep(0.1)
        progress(name, f"http://{self._address(name)}", SERVING, time.monotonic() - self.started_at)

    def _start_redis(self) -> None:
        from opentinker_runtime.core.embedded_redis import redis_server_command

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

    def _wait_services(self, progress: Progress, names: list[str]) -> None:
        pending = list(names)
        while pending:
            for name in list(pending):
                self._fail_if_exited(name)
                budget = max(0.2, min(1.0, self.deadline - time.monotonic()))
                if check_health(self._address(name), timeout=budget, tls=self.record_tls()) == SERVING:
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

    def record_tls(self) -> ClientTls | None:
        """How this launcher dials the services it waits for: as the stack's processes do."""
        return self.record.client_tls()

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


def is_secret_key(key: str) -> bool:
    """The runtime's rule for names of secrets (imported here: `opentinker up` needs the runtime,
    the rest of the CLI does not)."""
    from opentinker_runtime.core.redaction import is_secret_key as runtime_rule

    return runtime_rule(key)


def recordable_env(env: dict[str, str]) -> dict[str, str]:
    """What stack.json keeps of a process's environment: OPENTINKER_* and PYTHONUNBUFFERED, no
    variable whose name says secret (the admin key, a password file)."""
    return {key: value for key, value in env.items()
            if (key.startswith("OPENTINKER_") or key == "PYTHONUNBUFFERED") and not is_secret_key(key)}


def assign_metrics_ports(config: UpConfig) -> dict[str, int]:
    """Every service's metrics port: the explicit ones checked (free on the host, not given twice,
    not a gRPC or redis port), AUTO_PORT ones picked from ports the OS reports free now."""
    wanted = {s.name: config.metrics_ports.get(s.name, AUTO_PORT) for s in SERVICES}
    taken = {port: name for name, port in config.ports.items()}
    if config.redis_url is None:
        taken[config.redis_port] = REDIS
    for name, port in wanted.items():
        if port != AUTO_PORT:
            _check_metrics_port(config.host, name, port, taken)
            taken[port] = f"{name} metrics"
    auto = [name for name, port in wanted.items() if port == AUTO_PORT]
    return wanted | dict(zip(auto, _free_ports(config.host, len(auto), avoid=set(taken)), strict=True))


def _check_metrics_port(host: str, name: str, port: int, taken: dict[int, str]) -> None:
    flag = f"--{name}-metrics-port (or --metrics-base-port)"
    if port in taken:
        raise PortInUse(f"port {port} is given to both {taken[port]} and {name} metrics; change it with {flag}")
    if not port_is_free(host, port):
        raise PortInUse(f"port {port} ({name} metrics) is already in use on {host}; choose another "
                        f"with {flag}, or stop what is listening there")


def _free_ports(host: str, count: int, *, avoid: set[int]) -> list[int]:
    """`count` distinct ports the OS reports free on `host` (all held open until chosen)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with ExitStack() as holding:
        ports: list[int] = []
        while len(ports) < count:
            sock = holding.enter_context(socket.socket(family, socket.SOCK_STREAM))
            sock.bind((host.strip("[]"), 0))
            port = sock.getsockname()[1]
            if port not in avoid:
                ports.append(port)
        return ports


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
