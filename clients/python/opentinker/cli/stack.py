"""Start, inspect and stop the local stack: an embedded redis-server plus the five services
as detached processes, recorded in `<state-dir>/stack.json`.

`up` on a running stack starts only what is missing (a recorded process that is gone and whose
address nobody serves) and leaves the rest alone; `restart` stops one process and starts it again
the same way. Health is always asked of the recorded address, so a process that someone else
started there (by hand) shows as SERVING."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
import structlog

from opentinker.cli import procs, state
from opentinker.cli.errors import NoStack, PortInUse
from opentinker.cli.health_probe import SERVING, UNREACHABLE, check_health, check_http_health
from opentinker.cli.launcher import Launcher, Progress, UpConfig
from opentinker.cli.ports import port_is_free
from opentinker.cli.state import ProcessRecord, StackRecord
from opentinker.cli.topology import DASHBOARD, GATEWAY, HTTP_PROCESSES, REDIS

log = structlog.get_logger("opentinker.cli")


@dataclass(frozen=True, kw_only=True)
class ProcessStatus:
    name: str
    address: str
    pid: int | None
    alive: bool | None
    """None for an external redis (not ours to watch)."""
    health: str
    """What its recorded address answers: SERVING (from whichever process serves it), another
    grpc.health.v1 status, UNREACHABLE; DOWN when the recorded process is gone and nothing serves."""


@dataclass(frozen=True, kw_only=True)
class UpResult:
    record: StackRecord
    started: list[str]
    """Names of the processes this `up` started (all of them, unless the stack was running)."""
    was_running: bool
    """The stack was running already: only its missing processes were started."""


def up(config: UpConfig, progress: Progress,
       on_launch: Callable[[], None] = lambda: None) -> UpResult:
    """Start everything, wait until all is SERVING; on any failure stop what was started.
    On a running stack, start only its missing processes, with their recorded command and
    environment (the running stack's ports win over `config`'s).

    `on_launch` is called once the checks passed, just before the first process starts."""
    with state.locked(config.state_dir):
        existing = _running_stack(config.state_dir)
        if existing is not None:
            missing = [p for p in existing.processes if _is_missing(existing, p)]
            if missing:
                on_launch()
                _start_again(config, existing, missing, progress)
            return UpResult(record=existing, started=[p.name for p in missing], was_running=True)
        check_ports(config)
        on_launch()
        launcher = Launcher(config)
        try:
            launcher.launch_all(progress)
        except BaseException:
            launcher.stop_all()
            raise
        return UpResult(record=launcher.record, started=[p.name for p in launcher.record.processes],
                        was_running=False)


def restart(state_dir: Path, name: str, progress: Progress, *, timeout: float,
            stop_timeout: float = 10.0) -> tuple[ProcessRecord, ProcessRecord]:
    """Stop process `name` of the stack (SIGTERM, `stop_timeout`, SIGKILL) and start it again
    with its recorded command, environment and port; (old record, new record) once SERVING."""
    with state.locked(state_dir):
        record = state.load(state_dir)
        if record is None:
            raise NoStack(f"no stack recorded in {state_dir}; start one with `opentinker up`")
        old = next((p for p in record.processes if p.name == name), None)
        if old is None:
            names = ", ".join(p.name for p in record.processes)
            raise NoStack(f"the stack in {state_dir} has no {name} (it has {names})")
        procs.stop([old.ref], stop_timeout)
        config = _config_of(state_dir, record, timeout)
        _start_again(config, record, [old], progress)
        return old, next(p for p in record.processes if p.name == name)


def _start_again(config: UpConfig, record: StackRecord, processes: list[ProcessRecord],
                 progress: Progress) -> None:
    """Start `processes` of the running stack again; on failure stop just those."""
    launcher = Launcher(config, record)
    try:
        launcher.start_again(processes, progress)
    except BaseException:
        launcher.stop_started()
        raise


def _config_of(state_dir: Path, record: StackRecord, timeout: float) -> UpConfig:
    """What a Launcher needs to start recorded processes again (their ports are recorded)."""
    return UpConfig(state_dir=state_dir, host=record.host, ports={}, port_flags={}, redis_port=0,
                    redis_url=record.redis_url if record.redis_external else None, timeout=timeout)


def _running_stack(state_dir: Path) -> StackRecord | None:
    """The recorded stack when any of its processes is alive; a dead record is removed."""
    existing = state.load(state_dir)
    if existing is None:
        return None
    if any(procs.is_alive(p.ref) for p in existing.processes):
        return existing
    log.info("removing stale stack.json", state_dir=str(state_dir))
    state.remove(state_dir)
    return None


def _is_missing(record: StackRecord, process: ProcessRecord) -> bool:
    """Gone, and nobody serves its address (a process started there by hand is left alone)."""
    return not procs.is_alive(process.ref) and probe(record, process, timeout=1.0) != SERVING


def check_ports(config: UpConfig) -> None:
    """Raise PortInUse naming the first taken (or duplicated) port and how to change it."""
    wanted = dict(config.ports)
    if config.redis_url is None:
        wanted = {REDIS: config.redis_port, **wanted}
    if config.dashboard_port:
        wanted[DASHBOARD] = config.dashboard_port
    if config.gateway_port:
        wanted[GATEWAY] = config.gateway_port
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


def inspect(record: StackRecord, timeout: float = 1.0) -> list[ProcessStatus]:
    """Liveness and health of every recorded process (and of an external redis)."""
    statuses = []
    if record.redis_external:
        address = record.redis_url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
        statuses.append(ProcessStatus(name=REDIS, address=address, pid=None, alive=None,
                                      health=_redis_health(record.redis_url, timeout)))
    for proc in record.processes:
        alive = procs.is_alive(proc.ref)
        health = probe(record, proc, timeout)
        if not alive and health != SERVING:
            health = "DOWN"
        statuses.append(ProcessStatus(name=proc.name, address=proc.address, pid=proc.pid,
                                      alive=alive, health=health))
    return statuses


def probe(record: StackRecord, proc: ProcessRecord, timeout: float) -> str:
    """The health of whatever serves `proc`'s recorded address (whichever process that is)."""
    if proc.name == REDIS:
        return _redis_health(record.redis_url, timeout)
    if proc.name in HTTP_PROCESSES:
        return check_http_health(proc.address, timeout=timeout)
    return check_health(proc.address, timeout=timeout, tls=record.client_tls())


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
