"""Start, inspect and stop the local stack: an embedded redis-server plus the five services
as detached processes, recorded in `<state-dir>/stack.json`."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
import structlog

from opentinker.cli import procs, state
from opentinker.cli.errors import AlreadyRunning, PortInUse
from opentinker.cli.health_probe import SERVING, UNREACHABLE, check_health, check_http_health
from opentinker.cli.launcher import Launcher, Progress, UpConfig
from opentinker.cli.ports import port_is_free
from opentinker.cli.state import ProcessRecord, StackRecord
from opentinker.cli.topology import DASHBOARD, REDIS

log = structlog.get_logger("opentinker.cli")


@dataclass(frozen=True, kw_only=True)
class ProcessStatus:
    name: str
    address: str
    pid: int | None
    alive: bool | None
    """None for an external redis (not ours to watch)."""
    health: str
    """SERVING, another grpc.health.v1 status, UNREACHABLE, or DOWN when the process is gone."""


def up(config: UpConfig, progress: Progress,
       on_launch: Callable[[], None] = lambda: None) -> StackRecord:
    """Start everything, wait until all is SERVING; on any failure stop what was started.

    `on_launch` is called once the checks passed, just before the first process starts."""
    with state.locked(config.state_dir):
        _refuse_if_running(config.state_dir)
        check_ports(config)
        on_launch()
        launcher = Launcher(config)
        try:
            launcher.launch_all(progress)
        except BaseException:
            launcher.stop_all()
            raise
        return launcher.record


def check_ports(config: UpConfig) -> None:
    """Raise PortInUse naming the first taken (or duplicated) port and how to change it."""
    wanted = dict(config.ports)
    if config.redis_url is None:
        wanted = {REDIS: config.redis_port, **wanted}
    if config.dashboard_port:
        wanted[DASHBOARD] = config.dashboard_port
    seen: dict[int, str] = {}
    for name, port in wanted.items():
        flag = config.port_flags[name]
        if port in seen:
            raise PortInUse(f"port {port} is given to both {seen[port]} and {name}; "
                            f"change it with {flag}")
        seen[port] = name
        host = "127.0.0.1" if name == REDIS else config.host
        if not port_is_free(host, port):
            raise PortInUse(f"port {port} ({name}) is already in use on {host}; choose another "
                            f"with {flag}, or stop what is listening there")


def _refuse_if_running(state_dir: Path) -> None:
    existing = state.load(state_dir)
    if existing is None:
        return
    alive = [p for p in existing.processes if procs.is_alive(p.ref)]
    if alive:
        names = ", ".join(f"{p.name} (pid {p.pid})" for p in alive)
        raise AlreadyRunning(f"a stack is already running from {state_dir}: {names}; "
                             f"stop it with `opentinker down --state-dir {state_dir}`")
    log.info("removing stale stack.json", state_dir=str(state_dir))
    state.remove(state_dir)


def inspect(record: StackRecord, timeout: float = 1.0) -> list[ProcessStatus]:
    """Liveness and health of every recorded process (and of an external redis)."""
    statuses = []
    if record.redis_external:
        address = record.redis_url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
        statuses.append(ProcessStatus(name=REDIS, address=address, pid=None, alive=None,
                                      health=_redis_health(record.redis_url, timeout)))
    for proc in record.processes:
        alive = procs.is_alive(proc.ref)
        if not alive:
            health = "DOWN"
        elif proc.name == REDIS:
            health = _redis_health(record.redis_url, timeout)
        elif proc.name == DASHBOARD:
            health = check_http_health(proc.address, timeout=timeout)
        else:
            health = check_health(proc.address, timeout=timeout)
        statuses.append(ProcessStatus(name=proc.name, address=proc.address, pid=proc.pid,
                                      alive=alive, health=health))
    return statuses


def _redis_health(url: str, timeout: float) -> str:
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        return SERVING if client.ping() else UNREACHABLE
    except redis.RedisError:
        return UNREACHABLE
    finally:
        client.close()


def down(state_dir: Path, timeout: float) -> tuple[StackRecord | None, list[ProcessRecord]]:
    """Stop services first, then redis; return (what was recorded, what is still alive)."""
    with state.locked(state_dir):
        record = state.load(state_dir)
        if record is None:
            return None, []
        services = [p for p in record.processes if p.name != REDIS]
        backing = [p for p in record.processes if p.name == REDIS]
        left = procs.stop([p.ref for p in services], timeout)
        left += procs.stop([p.ref for p in backing], timeout)
        remaining = [p for p in record.processes if p.ref in left]
        if not remaining:
            state.remove(state_dir)
        return record, remaining
