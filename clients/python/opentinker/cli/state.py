"""The state directory of a local stack: `stack.json` (what runs, where) and `logs/`."""

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from opentinker.cli.procs import ProcessRef
from opentinker.client.tls import ClientTls, tls_from_env

STACK_FILE = "stack.json"
LOCK_FILE = "stack.lock"
FORMAT_VERSION = 1


@dataclass(kw_only=True)
class ProcessRecord:
    name: str
    """`redis` or a service name."""
    address: str
    """host:port clients connect to."""
    pid: int
    start_ticks: int | None
    command: list[str]
    log: str
    """Log file, relative to the state directory."""
    metrics_address: str = ""
    """host:port of the service's Prometheus /metrics ("" for redis, and in stack.json files
    written before services had metrics)."""
    env: dict[str, str] = field(default_factory=dict)
    """The OPENTINKER_* variables (and PYTHONUNBUFFERED) it was started with, secrets left out:
    `up` and `restart` start it again with these ({} in stack.json files written before)."""

    @property
    def ref(self) -> ProcessRef:
        return ProcessRef(pid=self.pid, start_ticks=self.start_ticks)


@dataclass(kw_only=True)
class StackRecord:
    host: str
    redis_url: str
    redis_external: bool
    processes: list[ProcessRecord] = field(default_factory=list)
    version: int = FORMAT_VERSION

    def client_tls(self) -> ClientTls | None:
        """How a client dials this stack: its CA and certificate when it runs with TLS (from the
        Scheduler's recorded OPENTINKER_TLS_* variables), else None."""
        scheduler = next((p for p in self.processes if p.name == "scheduler"), None)
        if scheduler is None or scheduler.env.get("OPENTINKER_TLS", "off") == "off":
            return None
        return tls_from_env(scheduler.env)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "StackRecord":
        data = json.loads(text)
        processes = [ProcessRecord(**p) for p in data.pop("processes")]
        return cls(**data, processes=processes)


def stack_path(state_dir: Path) -> Path:
    return state_dir / STACK_FILE


def load(state_dir: Path) -> StackRecord | None:
    """The recorded stack, or None when the state directory has none."""
    try:
        return StackRecord.from_json(stack_path(state_dir).read_text())
    except FileNotFoundError:
        return None


def save(state_dir: Path, record: StackRecord) -> None:
    """Write stack.json atomically (a reader never sees half a file)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{STACK_FILE}.{os.getpid()}.tmp"
    tmp.write_text(record.to_json())
    os.replace(tmp, stack_path(state_dir))


def remove(state_dir: Path) -> None:
    stack_path(state_dir).unlink(missing_ok=True)


class StateDirBusy(Exception):
    """Another `opentinker up` or `down` is working on the same state directory."""


@contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the state directory (one up/down at a time).

    Raises StateDirBusy at once when another process holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / LOCK_FILE, "w") as lock_file:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise StateDirBusy(str(state_dir)) from error
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
