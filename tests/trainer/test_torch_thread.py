"""Every session's torch work runs on one dedicated thread, never the event loop's."""

from __future__ import annotations

import asyncio
import threading
import time

from opentinker_trainer.sessions import _in_thread


def test_concurrent_work_runs_on_one_thread_one_call_at_a_time() -> None:
    active: list[int] = []
    overlaps: list[int] = []

    def work() -> int:
        active.append(1)
        overlaps.append(len(active))
        time.sleep(0.01)
        active.pop()
        return threading.get_ident()

    async def scenario() -> tuple[set[int], int]:
        idents = await asyncio.gather(*(_in_thread(work) for _ in range(8)))
        return set(idents), threading.get_ident()

    idents, loop_thread = asyncio.run(scenario())
    assert len(idents) == 1 and loop_thread not in idents
    assert max(overlaps) == 1  # serialised: torch's intra-op pool is the parallelism


def test_a_cancelled_caller_still_waits_for_its_work_to_finish() -> None:
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.2)
        finished.set()

    async def scenario() -> None:
        task = asyncio.create_task(_in_thread(slow))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert finished.is_set()  # control came back only after the thread was done

    asyncio.run(scenario())
