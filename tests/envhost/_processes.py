"""Processes seen through /proc: alive (zombies count as gone), the descendants of a process,
and waiting until a set of them is gone."""

from __future__ import annotations

import time
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent that ignores it counts as gone)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def descendants(pid: int) -> set[int]:
    """Live processes below `pid`."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, queue = set(), list(children.get(pid, []))
    while queue:
        child = queue.pop()
        found.add(child)
        queue.extend(children.get(child, []))
    return {p for p in found if alive(p)}


def wait_until_gone(pids: set[int], timeout: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while (left := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left
