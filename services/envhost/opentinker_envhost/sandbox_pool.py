"""Warm game processes: processes whose session ended cleanly, kept for the next session of the
same owner, game and config (process isolation).

A session's owner is its tenant, job and job attempt (`SessionManager`): a process never serves
two tenants, two jobs or two attempts of one job, and sessions opened without a job are never
pooled (their owner is unknown). The config is part of the key too, so a kept process only ever
builds games of the same class with the same arguments. What a new session gets is a new game
object built in a process that served earlier sessions of the same key; what the process kept
(module and class state, caches, the environment) is visible to it. A process is only kept when
none of its calls failed, it answered that it may be reused (`sandbox_child`), and it is alive.

The pool holds at most `capacity` idle processes in all (the least recently used is retired
first) and retires those idle for longer than `idle_ttl_s` when `expired` is asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from opentinker_envhost.sandbox_connection import GameProcess

OwnerKey = tuple[str, ...]


class WarmPool:
    """Idle game processes by key; the most recently kept is taken first."""

    def __init__(self, capacity: int, idle_ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.idle_ttl_s = idle_ttl_s
        self.clock = clock
        self.idle: dict[GameProcess, float] = {}
        """Idle process -> when it was kept, oldest first."""
        self.by_key: dict[OwnerKey, list[GameProcess]] = {}

    def __len__(self) -> int:
        return len(self.idle)

    def take(self, key: OwnerKey) -> GameProcess | None:
        """The process kept last for `key` (no longer idle: check that it is alive), or None."""
        stack = self.by_key.get(key)
        if not stack:
            return None
        process = stack.pop()
        del self.idle[process]
        if not stack:
            del self.by_key[key]
        return process

    def put(self, process: GameProcess) -> list[GameProcess]:
        """Keep `process` for its key; the processes this pushes out (least recently used first),
        which the caller retires: `process` itself when the pool holds none."""
        if self.capacity <= 0 or not process.owner_key:
            return [process]
        self.idle[process] = self.clock()
        self.by_key.setdefault(process.owner_key, []).append(process)
        evicted = []
        while len(self.idle) > self.capacity:
            oldest = next(iter(self.idle))
            self.remove(oldest)
            evicted.append(oldest)
        return evicted

    def remove(self, process: GameProcess) -> bool:
        """Forget `process` if it is idle here; whether it was."""
        if self.idle.pop(process, None) is None:
            return False
        stack = self.by_key[process.owner_key]
        stack.remove(process)
        if not stack:
            del self.by_key[process.owner_key]
        return True

    def expired(self) -> list[GameProcess]:
        """Remove and return the processes idle for longer than the TTL."""
        cutoff = self.clock() - self.idle_ttl_s
        old = [process for process, since in self.idle.items() if since < cutoff]
        for process in old:
            self.remove(process)
        return old

    def clear(self) -> list[GameProcess]:
        """Remove and return every idle process."""
        everyone = list(self.idle)
        self.idle.clear()
        self.by_key.clear()
        return everyone
