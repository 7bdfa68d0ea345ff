"""The batcher gathers a trickle of arrivals into one engine step, never past its bound."""

from __future__ import annotations

import asyncio
import time

import pytest

from opentinker_rollout.batcher import GenerationBatcher
from tests.rollout._batcher import CountingEngine, req


async def _trickle(batcher: GenerationBatcher, count: int, gap_s: float, n: int = 1) -> list:
    """`count` requests, one every `gap_s`, each awaited concurrently."""
    tasks = []
    for i in range(count):
        tasks.append(asyncio.create_task(batcher.generate(req(i, n=n))))
        await asyncio.sleep(gap_s)
    return await asyncio.gather(*tasks)


def test_a_trickle_of_arrivals_closer_than_the_window_is_one_engine_step() -> None:
    engine = CountingEngine(delay_s=0.005)

    async def scenario() -> None:
        batcher = GenerationBatcher(engine, max_batch_size=64, gather_window_s=0.05, max_gather_s=2.0)
        answers = await _trickle(batcher, 12, gap_s=0.005)
        await batcher.close()
        assert [a.generations[0].token_ids[0] for a in answers] == list(range(12))

    asyncio.run(scenario())
    assert engine.calls == [12]


def test_without_a_gather_window_the_same_trickle_takes_many_steps() -> None:
    """The control: the gathering, not the engine's speed, is what merged the steps above."""
    engine = CountingEngine(delay_s=0.005)

    async def scenario() -> None:
        batcher = GenerationBatcher(engine, max_batch_size=64, gather_window_s=0.0, max_gather_s=0.0)
        await _trickle(batcher, 12, gap_s=0.02)
        await batcher.close()

    asyncio.run(scenario())
    assert len(engine.calls) >= 6 and sum(engine.calls) == 12


def test_a_steady_stream_is_still_served_once_per_max_gather() -> None:
    """Arrivals that never pause cannot hold the engine back for longer than max_gather_s."""
    engine = CountingEngine(delay_s=0.001)

    async def scenario() -> float:
        batcher = GenerationBatcher(engine, max_batch_size=1024, gather_window_s=0.05, max_gather_s=0.1)
        started = time.monotonic()
        first = asyncio.create_task(batcher.generate(req(0)))
        stream = asyncio.create_task(_trickle(batcher, 200, gap_s=0.005))  # ~1 s, never quiet
        await first
        waited = time.monotonic() - started
        await stream
        await batcher.close()
        return waited

    waited = asyncio.run(scenario())
    assert waited < 0.9  # answered long before the stream ended (~1 s): the bound held
    assert len(engine.calls) >= 3  # the stream was cut into several steps, none waited for the end


def test_a_full_batch_does_not_wait_for_the_window() -> None:
    engine = CountingEngine(delay_s=0.001)

    async def scenario() -> float:
        batcher = GenerationBatcher(engine, max_batch_size=8, gather_window_s=5.0, max_gather_s=5.0)
        started = time.monotonic()
        await asyncio.gather(*(batcher.generate(req(i)) for i in range(8)))
        took = time.monotonic() - started
        await batcher.close()
        return took

    assert asyncio.run(scenario()) < 4.0  # a 5 s window would have been waited out
    assert engine.calls == [8]


def test_bad_gather_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="gather_window_s"):
        GenerationBatcher(CountingEngine(), gather_window_s=0.5, max_gather_s=0.1)
