"""Continuous batching on the builtin tiny model: requests that join a running batch between
steps decode exactly what they would alone; a short request is answered while a long one is
still decoding; weight updates wait for the running rows; abandoned requests free their rows."""

from __future__ import annotations

import asyncio

import pytest

from opentinker_rollout.batcher import GenerationBatcher
from tests.rollout._generation import drive, prompts, reference_logprobs, request
from tests.rollout._support import tiny_engine


def alone(engine, req):
    return engine.generate([req])[0]


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=1.0, seed=11)],
                         ids=["greedy", "seeded"])
def test_requests_joining_mid_decoding_get_what_they_would_alone(sampling):
    engine = tiny_engine(eos_token_ids=())
    short, mid, long_, longest = prompts()[0], prompts()[1], prompts()[2], prompts()[3]
    plan = {0: [("a", request(short, max_new_tokens=30, **sampling))],
            3: [("b", request(longest, max_new_tokens=6, **sampling)),     # longer than a's context
                ("c", request(short, max_new_tokens=25, n=2, **sampling))],
            12: [("d", request(mid, max_new_tokens=10, **sampling))],       # after b left: trimmed
            20: [("e", request(long_, max_new_tokens=4, **sampling))]}
    answers = drive(engine, plan)
    for batch in plan.values():
        for key, req in batch:
            for got, want in zip(answers[key], alone(tiny_engine(eos_token_ids=()), req), strict=True):
                assert got.token_ids == want.token_ids, key
                assert got.finish_reason == want.finish_reason
                assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs, strict=True)) < 1e-4
    (first_c, second_c) = answers["c"]
    assert first_c.token_ids != second_c.token_ids or sampling["temperature"] == 0.0
    assert engine.running_rows == 0


def test_joined_rows_report_the_logprobs_of_a_full_forward():
    engine = tiny_engine(eos_token_ids=())
    first, second = prompts()[3], prompts()[0]
    answers = drive(engine, {0: [("x", request(first, max_new_tokens=15, seed=3))],
                             5: [("y", request(second, max_new_tokens=15, seed=4))]})
    for key, prompt in (("x", first), ("y", second)):
        (generation,) = answers[key]
        expected = reference_logprobs(prompt, list(generation.token_ids))
        assert max(abs(a - b) for a, b in zip(generation.logprobs, expected, strict=True)) < 1e-4


def test_a_short_request_is_answered_while_a_long_one_decodes():
    engine = tiny_engine(eos_token_ids=())
    order: list[str] = []

    async def timed(batcher, name, req):
        answer = await batcher.generate(req)
        order.append(name)
        return answer

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=8)
        long_task = asyncio.create_task(timed(batcher, "long", request(prompts()[0], max_new_tokens=120)))
        while engine.running_rows == 0:
            await asyncio.sleep(0.001)
        short = await timed(batcher, "short", request(prompts()[1], max_new_tokens=3))
        rows_while_long_runs = engine.running_rows
        await long_task
        await batcher.close()
        return short, rows_while_long_runs

    short, rows_while_long_runs = asyncio.run(scenario())
    assert order == ["short", "long"]
    assert len(short.generations[0].token_ids) == 3 and rows_while_long_runs == 1


def test_a_weight_update_waits_for_running_rows_and_holds_new_ones():
    engine = tiny_engine(eos_token_ids=())

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=8)
        running = asyncio.create_task(batcher.generate(request(prompts()[0], max_new_tokens=40)))
        while engine.running_rows == 0:
            await asyncio.sleep(0.001)
        async with batcher.exclusive():
            rows_inside = engine.running_rows
            running_done = running.done()
            waiting = asyncio.create_task(batcher.generate(request(prompts()[1], max_new_tokens=5)))
            await asyncio.sleep(0.05)
            held = not waiting.done() and engine.running_rows == 0
            batcher.versions[""] = 7
        answers = await running, await waiting
        await batcher.close()
        return rows_inside, running_done, held, answers

    rows_inside, running_done, held, (old, new) = asyncio.run(scenario())
    assert rows_inside == 0 and running_done and held
    assert (old.policy_version, new.policy_version) == (0, 7)
    assert len(old.generations[0].token_ids) == 40


def test_an_abandoned_request_frees_its_rows():
    engine = tiny_engine(eos_token_ids=())

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=8)
        doomed = asyncio.create_task(batcher.generate(request(prompts()[0], max_new_tokens=400, n=3)))
        while engine.running_rows == 0:
            await asyncio.sleep(0.001)
        rows_before = engine.running_rows
        doomed.cancel()
        survivor = await batcher.generate(request(prompts()[1], max_new_tokens=4))
        rows_after = engine.running_rows
        await batcher.close()
        return rows_before, survivor, rows_after

    rows_before, survivor, rows_after = asyncio.run(scenario())
    assert rows_before == 3 and rows_after == 0   # the cancelled rows left long before 400 tokens
    assert len(survivor.generations[0].token_ids) == 4
