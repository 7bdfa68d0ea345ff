"""Detached processes: start one in its own session, tell whether a recorded pid is still
that same process, and stop a group of them (SIGTERM, wait, SIGKILL)."""

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger("opentinker.cli")


@dataclass(frozen=True, kw_only=True)
class ProcessRef:
    """A process as recorded in stack.json."""

    pid: int
    start_ticks: int | None
    """Kernel start time of the process (Linux /proc); tells a reused pid from ours."""


def start_detached(command: list[str], *, env: Mapping[str, str],
                   log_path: Path) -> subprocess.Popen:
    """Start `command` in a new session (own process group), stdout+stderr appended to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            command,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 = state), or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (None where /proc is unavailable)."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def is_alive(ref: ProcessRef) -> bool:
    """True while the recorded process runs (a zombie or a reused pid counts as gone)."""
    if Path("/proc/self/stat").exists():
        fields = _proc_stat(ref.pid)
        if fields is None or fields[0] in ("Z", "X"):
            return False
        return ref.start_ticks is None or int(fields[19]) == ref.start_ticks
    try:
        os.kill(ref.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(ref: ProcessRef, sig: signal.Signals) -> None:
    """Signal the process group led by `ref` (each stack process leads its own session)."""
    if not is_alive(ref):
        return
    try:
        os.killpg(ref.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(ref.pid, sig)


def wait_gone(refs: Iterable[ProcessRef], timeout: float) -> list[ProcessRef]:
    """Wait up to `timeout` seconds for every process to end; return the ones still alive."""
    pending = list(refs)
    deadline = time.monotonic() + timeout
    while True:
        _reap_children()
        pending = [r for r in pending if is_alive(r)]
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(0.05)


def stop(refs: Iterable[ProcessRef], timeout: float) -> list[ProcessRef]:
    """SIGTERM each process group, wait up to `timeout`, SIGKILL the rest.

    Returns the processes still alive afterwards (empty when all are gone)."""
    refs = list(refs)
    for ref in refs:
        log.debug("sigterm", pid=ref.pid)
        _signal_group(ref, signal.SIGTERM)
    remaining = wait_gone(refs, timeout)
    for ref in remaining:
        log.warning("sigkill after timeout", pid=ref.pid, timeout_s=timeout)
        _signal_group(ref, signal.SIGKILL)
    return wait_gone(remaining, 5.0)


def _reap_children() -> None:
    """Collect exit statuses of our own finished children so they do not linger as zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
