"""The generation batcher: concurrent requests share engine calls, the batch size is bounded,
weight updates wait for the running call, failures reach every caller of the batch; and
episodes that wait on their environment do not stop the others from generating."""

from __future__ import annotations

import asyncio
import time

import pytest

from opentinker_rollout.batcher import BatcherClosed, GenerationBatcher
from opentinker_rollout.engine import SamplingConfig
from opentinker_rollout.environment import StepOutcome
from opentinker_rollout.episode import EpisodeLimits, StopReason
from opentinker_rollout.runner import EpisodeBatch, EpisodeServices, EpisodeSpec, run_episodes
from tests.rollout._batcher import CountingEngine, req
from tests.rollout._support import EOS, ScriptedEnvironment, ScriptedRenderer


def test_concurrent_requests_share_engine_calls_and_get_their_own_answers():
    engine = CountingEngine()

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=32)
        answers = await asyncio.gather(*(batcher.generate(req(i)) for i in range(16)))
        await batcher.close()
        return answers, batcher.stats

    answers, stats = asyncio.run(scenario())
    assert [a.generations[0].token_ids[0] for a in answers] == list(range(16))
    assert engine.calls == [16] and stats.engine_calls == 1 and stats.rows == 16


def test_the_batch_size_bounds_rows_per_call_counting_samples():
    engine = CountingEngine()

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=4)
        answers = await asyncio.gather(*(batcher.generate(req(i, n=2)) for i in range(6)))
        await batcher.close()
        return answers

    answers = asyncio.run(scenario())
    assert engine.calls == [4, 4, 4]
    assert all(len(a.generations) == 2 for a in answers)


def test_requests_arriving_during_a_call_form_the_next_batch():
    engine = CountingEngine(delay_s=0.2)

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=32)
        first = asyncio.create_task(batcher.generate(req(0)))
        await asyncio.to_thread(engine.running.wait, 5)
        later = [asyncio.create_task(batcher.generate(req(i))) for i in range(1, 6)]
        await asyncio.gather(first, *later)
        await batcher.close()

    asyncio.run(scenario())
    assert engine.calls == [1, 5]


def test_exclusive_waits_for_the_running_call_and_holds_the_next_one():
    engine = CountingEngine(delay_s=0.2)
    events: list[str] = []

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=8)
        first = asyncio.create_task(batcher.generate(req(1)))
        await asyncio.to_thread(engine.running.wait, 5)
        async with batcher.exclusive():
            events.append(f"exclusive after {len(engine.calls)} call(s), running={engine.running.is_set()}")
            second = asyncio.create_task(batcher.generate(req(2)))
            await asyncio.sleep(0.1)
            events.append(f"calls while held: {len(engine.calls)}")
            batcher.versions[""] = 1
        answers = await asyncio.gather(first, second)
        await batcher.close()
        return answers

    first, second = asyncio.run(scenario())
    assert events == ["exclusive after 1 call(s), running=False", "calls while held: 1"]
    assert (first.policy_version, second.policy_version) == (0, 1)


def test_an_engine_failure_reaches_every_caller_of_the_batch_and_the_batcher_goes_on():
    engine = CountingEngine(fail=True)

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=8)
        results = await asyncio.gather(*(batcher.generate(req(i)) for i in range(3)),
                                       return_exceptions=True)
        engine.fail = False
        after = await batcher.generate(req(9))
        await batcher.close()
        return results, after

    results, after = asyncio.run(scenario())
    assert all(isinstance(r, RuntimeError) for r in results)
    assert after.generations[0].token_ids == (9, EOS)


def test_close_fails_waiting_callers_and_refuses_new_ones():
    engine = CountingEngine(delay_s=0.2)

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=1)
        waiting = [asyncio.create_task(batcher.generate(req(i))) for i in range(3)]
        await asyncio.to_thread(engine.running.wait, 5)
        await batcher.close()
        results = await asyncio.gather(*waiting, return_exceptions=True)
        with pytest.raises(BatcherClosed):
            await batcher.generate(req(5))
        return results

    results = asyncio.run(scenario())
    assert all(isinstance(r, BatcherClosed) for r in results)


def test_episodes_waiting_on_their_environment_let_others_generate_in_batches():
    """16 episodes x 3 turns with a slow environment: far fewer engine calls than the 48
    generations, and the whole run takes about 3 environment delays, not 48."""
    engine = CountingEngine(delay_s=0.01)

    def environment(episode) -> ScriptedEnvironment:
        return ScriptedEnvironment(step_delay_s=0.1, outcomes=[
            StepOutcome(observation="a"), StepOutcome(observation="b"), StepOutcome(done=True)])

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=16)
        services = EpisodeServices(generator=batcher, renderer=ScriptedRenderer([1, 2], [3]),
                                   environments=environment, max_context_length=1024)
        batch = EpisodeBatch(specs=(EpisodeSpec(group_id="g", seed=1),), group_size=16,
                             sampling=SamplingConfig(max_new_tokens=4), limits=EpisodeLimits())
        started = time.monotonic()
        results = [r async for r in run_episodes(batch, services)]
        await batcher.close()
        return results, time.monotonic() - started

    results, seconds = asyncio.run(scenario())
    assert len(results) == 16 and all(r.stop_reason is StopReason.DONE for r in results)
    assert all(len(r.turns) == 3 for r in results)
    assert sum(engine.calls) == 48 and len(engine.calls) <= 8
    assert seconds < 1.5
