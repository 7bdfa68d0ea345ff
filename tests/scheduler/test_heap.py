"""The scheduler process freezes what startup built, so garbage collections stay short."""

from __future__ import annotations

import asyncio
import gc

from opentinker_runtime.core.heap import settle_heap, settle_heap_once_started
from opentinker_scheduler.main import build_plan
from opentinker_scheduler.settings import SchedulerSettings


def test_settle_heap_moves_every_survivor_out_of_the_collectors_reach() -> None:
    gc.unfreeze()
    try:
        survivors = [[index] for index in range(5_000)]
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle  # startup garbage: collected, not frozen
        frozen = settle_heap()
        # frozen objects freed since (another thread's, a temporary's) leave the count: <=, not ==
        assert frozen >= len(survivors) and len(survivors) <= gc.get_freeze_count() <= frozen
        assert all(not gc.is_tracked(s) or s not in gc.get_objects(generation=2) for s in survivors[:3])
    finally:
        gc.unfreeze()


def test_the_service_settles_its_heap_once_started(redis_url: str) -> None:
    async def scenario() -> None:
        plan = await build_plan(SchedulerSettings(port=0, auth="disabled", redis_url=redis_url))
        assert settle_heap_once_started in plan.start_hooks
        for close in plan.close_hooks:
            await close()

    asyncio.run(scenario())
