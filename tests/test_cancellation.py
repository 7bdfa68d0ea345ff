"""Cancels that asyncio can swallow cannot hang a loop or a server's stop."""

from __future__ import annotations

import asyncio
import contextlib

from opentinker_runtime.core.cancellation import gather_cancelled, raise_if_cancelled


async def _swallows_cancel_once(ticks: list[int]) -> None:
    """A wait-and-go-round loop whose wait loses the first cancel (as 3.11's wait_for can)."""
    swallowed = False
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed = True
        ticks.append(1)


async def _swallows_cancels_until(released: asyncio.Event) -> None:
    while not released.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.01)


def test_a_loop_that_checks_raise_if_cancelled_ends_even_when_its_wait_swallowed_the_cancel() -> None:
    async def scenario() -> None:
        rounds: list[int] = []

        async def loop() -> None:
            while True:
                with contextlib.suppress(asyncio.CancelledError):  # the swallowing wait
                    await asyncio.sleep(0.01)
                raise_if_cancelled()
                rounds.append(1)

        task = asyncio.create_task(loop())
        await asyncio.sleep(0.05)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=1.0)
        assert task in done and task.cancelled()
        assert rounds  # it did run before the cancel

    asyncio.run(scenario())


def test_gather_cancelled_cancels_again_until_a_task_that_swallowed_one_cancel_ends() -> None:
    async def scenario() -> None:
        ticks: list[int] = []
        task = asyncio.create_task(_swallows_cancel_once(ticks))
        await asyncio.sleep(0.03)
        await gather_cancelled([task], timeout_seconds=5.0, what="test")
        assert task.cancelled()

    asyncio.run(scenario())


def test_gather_cancelled_gives_up_on_a_task_that_never_ends_within_its_timeout() -> None:
    async def scenario() -> None:
        released = asyncio.Event()
        stubborn = asyncio.create_task(_swallows_cancels_until(released))
        polite = asyncio.create_task(asyncio.sleep(60))
        await asyncio.sleep(0.03)  # both running (a task cancelled before it starts never runs)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await gather_cancelled([stubborn, polite], timeout_seconds=0.3, what="test")
        assert 0.25 <= loop.time() - started < 2.0
        assert polite.cancelled() and not stubborn.done()
        released.set()
        await stubborn

    asyncio.run(scenario())
