"""Which shared game process a job's session goes to (process isolation, `shared_worker`).

A key is (tenant, job, attempt, game, config): a process only ever serves sessions of one key,
so a game shares its process with nothing its own job did not start. A new session goes to the
key's process with the fewest sessions that takes new ones (not tainted, fewer than
the key's capacity), or to a new process (a warm one the key left, else a fork). A slow key
(SLOW_CALL_S) gets a process per session. A process whose last session left goes back to the warm
pool when it may (no call failed, it said it is reusable), else it ends.

A key's capacity starts at `sessions_per_process` and falls as its calls turn out slower: a
process runs a batch's calls one after the other and answers them together, so each call waits
for its neighbours' calls. The capacity is kept at what fits BATCH_BUDGET_S of calls of the
key's median duration (over each DENSITY_WINDOW calls; lowered once that is half of it or less),
and when it falls, the sessions placed
last in a process beyond it move to another process at their next call (`shared_game` replays
their episode there). A fast game's sessions thus share few processes (fewer wake-ups per step),
and a slower game's spread over more (more cores, less waiting). It never rises again while the
key has sessions.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

import structlog

from opentinker_envhost.limits import SessionLimits
from opentinker_envhost.sandbox_connection import GameProcess
from opentinker_envhost.shared_worker import SharedWorker

log = structlog.get_logger(__name__)

SLOW_CALL_S = 0.005
"""A reset or step taking longer than this (wall time, in its process) counts as slow."""
SLOW_WINDOW = 16
BATCH_BUDGET_S = SLOW_CALL_S
"""A process serves at most as many sessions of a key as calls of the key's median duration fit
in this (at least one): about the most a call waits behind its neighbours' calls in a batch, no
longer than one slow call would take."""
DENSITY_WINDOW = 32
"""Reset and step durations per new estimate of a key's median call."""

Key = tuple[str, ...]


class SharedPlacement:
    """The shared processes of every key, and which keys are slow."""

    def __init__(self, limits: SessionLimits, *, get_process: Callable[[Key], Awaitable[GameProcess]],
                 keep: Callable[[GameProcess], None], retire: Callable[[GameProcess], None],
                 kill: Callable[[int], None]) -> None:
        self.limits = limits
        self.get_process = get_process
        self.keep = keep
        self.retire = retire
        self.kill = kill
        self.workers: dict[Key, list[SharedWorker]] = {}
        self.slow: set[Key] = set()
        self.recent: dict[Key, collections.deque[bool]] = {}
        """Whether each of a key's last SLOW_WINDOW reset/step calls was slow."""
        self.capacities: dict[Key, int] = {}
        """Keys whose capacity fell below sessions_per_process (`lower_capacity`)."""
        self.durations: dict[Key, list[float]] = {}
        """Each key's reset/step durations since its last estimate (fewer than DENSITY_WINDOW)."""

    def is_slow(self, key: Key) -> bool:
        return key in self.slow

    def capacity(self, key: Key) -> int:
        """Most sessions of `key` one of its shared processes serves now."""
        return self.capacities.get(key, self.limits.sessions_per_process)

    def observe(self, key: Key, seconds: float) -> None:
        """A reset or step of `key` took `seconds` in its process: the key turns slow when half
        of its last SLOW_WINDOW calls took longer than SLOW_CALL_S (one call delayed by a busy
        machine does not), and its capacity falls to what its median call allows."""
        durations = self.durations.get(key)
        if durations is None:
            if key not in self.workers:
                return  # a late reply of a key whose sessions are all gone: nothing to place any more
            durations = self.durations[key] = []
        durations.append(seconds)
        if len(durations) >= DENSITY_WINDOW:
            self.durations[key] = []
            self._fit_capacity(key, sorted(durations)[len(durations) // 2])
        slow = seconds > SLOW_CALL_S
        recent = self.recent.get(key)
        if recent is None:
            if not slow:
                return  # the common case: nothing slow seen lately
            recent = self.recent[key] = collections.deque(maxlen=SLOW_WINDOW)
        recent.append(slow)
        if sum(recent) * 2 >= SLOW_WINDOW:
            self.mark_slow(key)
        elif not any(recent):
            del self.recent[key]

    def mark_slow(self, key: Key) -> None:
        if key not in self.slow:
            self.slow.add(key)
            log.info("shared_game_is_slow", key=key[:-1], detail="its sessions move to processes of their own")
            for worker in self.workers.get(key, ()):
                if not worker.private:
                    worker.lower_capacity(0)

    def lower_capacity(self, key: Key, capacity: int) -> None:
        """Serve at most `capacity` (>= 1) sessions of `key` per shared process from now on;
        sessions beyond it in a process move at their next call."""
        if capacity >= self.capacity(key):
            return
        self.capacities[key] = capacity
        log.info("shared_game_capacity_lowered", key=key[:-1], sessions_per_process=capacity,
                 detail="sessions beyond it move to other processes")
        for worker in self.workers.get(key, ()):
            if not worker.private:
                worker.lower_capacity(capacity)

    def _fit_capacity(self, key: Key, median_s: float) -> None:
        """Lower the capacity to what fits the budget, once that is half of it or less (a few
        sessions more or less change little, and every move replays an episode)."""
        fits = int(BATCH_BUDGET_S / median_s) if median_s > 0 else self.limits.sessions_per_process
        if fits * 2 <= self.capacity(key):
            self.lower_capacity(key, max(1, fits))

    async def place(self, key: Key, session_id: str, *, private: bool = False) -> tuple[SharedWorker, int]:
        """A process for `session_id` and its slot there (waits for a new process to start)."""
        worker = None if private else self._roomiest(key)
        if worker is None:
            worker = SharedWorker(key, capacity=self.capacity(key), private=private, limits=self.limits,
                                  kill=self.kill)
            self.workers.setdefault(key, []).append(worker)
            slot = worker.add_slot(session_id)
            try:
                await worker.start(self.get_process(key))
            except BaseException:
                self._drop(worker)
                raise
            return worker, slot
        slot = worker.add_slot(session_id)
        if not worker.ready.done():
            try:
                await asyncio.shield(worker.ready)
            except BaseException:
                worker.remove_slot(slot)
                raise
        return worker, slot

    def left(self, worker: SharedWorker) -> None:
        """A session left `worker`: when none is left, keep its process warm or end it."""
        if worker.slots or worker not in self.workers.get(worker.key, ()):
            return
        self._drop(worker)
        process = worker.process
        if process is None:
            return
        if worker.tainted or worker.gone or worker.busy:  # busy: closes of sessions that moved away
            self.retire(process)
        else:
            self.keep(process)

    async def shutdown(self) -> None:
        for workers in list(self.workers.values()):
            for worker in list(workers):
                self._drop(worker)
                if worker.process is not None:
                    self.retire(worker.process)

    def _roomiest(self, key: Key) -> SharedWorker | None:
        candidates = [w for w in self.workers.get(key, ()) if w.accepts()]
        return min(candidates, key=lambda w: len(w.slots)) if candidates else None

    def _drop(self, worker: SharedWorker) -> None:
        workers = self.workers.get(worker.key)
        if workers is not None and worker in workers:
            workers.remove(worker)
            if not workers:  # the key's sessions are gone: what was learnt about it goes too
                del self.workers[worker.key]
                self.capacities.pop(worker.key, None)
                self.durations.pop(worker.key, None)
