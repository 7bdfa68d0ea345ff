"""DaemonWorkers: sync game calls reuse idle threads, a stuck call keeps only its own thread,
and idle threads exit."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from opentinker_envhost.game_calls import DaemonWorkers, GameRaised


def test_sequential_calls_reuse_one_thread_and_return_results() -> None:
    async def scenario() -> None:
        workers = DaemonWorkers()
        names = [await workers.submit(lambda: threading.current_thread().name) for _ in range(20)]
        assert len(set(names)) == 1 and workers.started == 1
        assert await workers.submit(lambda: 6 * 7) == 42
    asyncio.run(scenario())


def test_a_stuck_call_keeps_its_thread_and_others_go_on() -> None:
    async def scenario() -> None:
        workers = DaemonWorkers()
        release = threading.Event()
        stuck = workers.submit(release.wait)
        await asyncio.sleep(0.05)
        assert await asyncio.wait_for(workers.submit(lambda: "fast"), 2) == "fast"
        assert workers.started == 2 and not stuck.done()
        release.set()
        assert await stuck is True
    asyncio.run(scenario())


def test_exceptions_arrive_as_game_raised_with_the_traceback() -> None:
    async def scenario() -> None:
        workers = DaemonWorkers()
        with pytest.raises(GameRaised, match="ZeroDivisionError"):
            await workers.submit(lambda: 1 / 0)
        assert await workers.submit(lambda: "still works") == "still works"
    asyncio.run(scenario())


def test_idle_threads_exit() -> None:
    async def scenario() -> None:
        workers = DaemonWorkers(idle_seconds=0.1)
        await asyncio.gather(*(workers.submit(lambda: time.sleep(0.05)) for _ in range(4)))
        assert workers.started == 4
        before = threading.active_count()
        await asyncio.sleep(0.5)
        assert threading.active_count() <= before - 4
        assert await workers.submit(lambda: "new") == "new" and workers.started == 5
    asyncio.run(scenario())
