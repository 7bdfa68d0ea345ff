"""The transformers engine's own sampling loop on the builtin tiny model: the logprob
contract against a plain full forward, greedy decoding, stop tokens and strings, left padding,
seeds and limits."""

from __future__ import annotations


from opentinker_rollout.engine import FinishReason, GenerationRequest, SamplingConfig
from tests.rollout._generation import prompts, reference_logprobs, request
from tests.rollout._support import full_forward_logprobs, tiny_engine, tiny_model

GREEDY = SamplingConfig(max_new_tokens=12, temperature=0.0)


def test_logprobs_at_temperature_1_equal_log_softmax_of_a_full_forward():
    engine = tiny_engine(eos_token_ids=())
    batch = [request(p, max_new_tokens=20, temperature=1.0, seed=i + 1) for i, p in enumerate(prompts())]
    for req, (generation,) in zip(batch, engine.generate(batch), strict=True):
        assert len(generation.token_ids) == 20
        sequence = [*req.prompt_ids, *generation.token_ids]
        model_logprobs_T_V = full_forward_logprobs(tiny_model().model, sequence)
        start = len(req.prompt_ids) - 1
        expected = [model_logprobs_T_V[start + i, t].item() for i, t in enumerate(generation.token_ids)]
        assert max(abs(a - b) for a, b in zip(expected, generation.logprobs, strict=True)) < 1e-4


def test_logprobs_are_those_of_the_filtered_tempered_distribution():
    engine = tiny_engine(eos_token_ids=())
    settings = {"temperature": 0.7, "top_k": 20, "top_p": 0.9}
    batch = [request(p, max_new_tokens=16, seed=3, **settings) for p in prompts()]
    for req, (generation,) in zip(batch, engine.generate(batch), strict=True):
        expected = reference_logprobs(req.prompt_ids, list(generation.token_ids), **settings)
        assert max(abs(a - b) for a, b in zip(expected, generation.logprobs, strict=True)) < 1e-4
        plain = reference_logprobs(req.prompt_ids, list(generation.token_ids))
        assert sum(generation.logprobs) > sum(plain)  # renormalised mass: each token is likelier


def test_top_k_1_is_greedy():
    engine = tiny_engine(eos_token_ids=())
    prompt = prompts()[1]
    (sampled,), = engine.generate([request(prompt, max_new_tokens=10, temperature=1.0, top_k=1, seed=9)])
    (greedy,), = engine.generate([request(prompt, max_new_tokens=10, temperature=0.0)])
    assert sampled.token_ids == greedy.token_ids
    assert all(abs(lp) < 1e-6 for lp in sampled.logprobs)  # a one-token distribution


def test_greedy_is_deterministic_and_follows_the_argmax():
    engine = tiny_engine(eos_token_ids=())
    prompt = prompts()[0]
    (first,), = engine.generate([GenerationRequest(prompt_ids=prompt, sampling=GREEDY)])
    (second,), = engine.generate([GenerationRequest(prompt_ids=prompt, sampling=GREEDY)])
    assert first == second and first.finish_reason is FinishReason.LENGTH
    logprobs_T_V = full_forward_logprobs(tiny_model().model, [*prompt, *first.token_ids])
    argmax = logprobs_T_V[len(prompt) - 1:-1].argmax(dim=-1).tolist()
    assert list(first.token_ids) == argmax
    assert [round(x, 4) for x in first.logprobs] == [
        round(logprobs_T_V[len(prompt) - 1 + i, t].item(), 4) for i, t in enumerate(first.token_ids)]


def test_a_left_padded_batch_gives_the_same_greedy_tokens_as_one_at_a_time():
    engine = tiny_engine(eos_token_ids=())
    batch = [GenerationRequest(prompt_ids=p, sampling=GREEDY) for p in prompts()]
    together = [generations[0] for generations in engine.generate(batch)]
    alone = [engine.generate([req])[0][0] for req in batch]
    assert len({len(p) for p in prompts()}) == 4
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    for a, b in zip(together, alone, strict=True):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_a_stop_token_ends_the_generation_and_is_kept():
    engine = tiny_engine(eos_token_ids=())
    prompt = prompts()[2]
    (free,), = engine.generate([GenerationRequest(prompt_ids=prompt, sampling=GREEDY)])
    stop_id = free.token_ids[4]
    first_index = free.token_ids.index(stop_id)
    (stopped,), = engine.generate([request(prompt, max_new_tokens=12, temperature=0.0,
                                           stop_token_ids=(stop_id,))])
    assert stopped.token_ids == free.token_ids[:first_index + 1]
    assert stopped.finish_reason is FinishReason.STOP


def test_the_model_eos_always_stops():
    engine = tiny_engine()
    batch = [request(p, max_new_tokens=200, temperature=1.0, seed=s + 1) for s, p in enumerate(prompts() * 4)]
    results = [gens[0] for gens in engine.generate(batch)]
    stopped = [g for g in results if g.finish_reason is FinishReason.STOP]
    assert stopped, "an untrained model emits eos (1/260) within 200 tokens in most rows"
    assert all(g.token_ids[-1] in engine.eos_token_ids for g in stopped)
    assert all(engine.eos_token_ids[0] not in g.token_ids[:-1] for g in results)


def test_a_stop_string_ends_the_generation_and_is_kept():
    engine = tiny_engine(eos_token_ids=())
    prompt = prompts()[3]
    (free,), = engine.generate([GenerationRequest(prompt_ids=prompt, sampling=GREEDY)])
    text = engine.decode(free.token_ids)
    stop = text[5:7]
    (stopped,), = engine.generate([request(prompt, max_new_tokens=12, temperature=0.0,
                                           stop_strings=(stop,))])
    assert stopped.finish_reason is FinishReason.STOP
    assert engine.decode(stopped.token_ids).endswith(stop)
    assert stop not in engine.decode(stopped.token_ids[:-1])


def test_rows_finish_independently_in_one_batch():
    engine = tiny_engine(eos_token_ids=())
    prompt = prompts()[0]
    short = request(prompt, max_new_tokens=3, temperature=0.0)
    long = request(prompt, max_new_tokens=9, temperature=0.0)
    other = request(prompts()[3], max_new_tokens=2, temperature=0.0)
    (a,), (b,), _ = engine.generate([short, long, other])
    (b_alone,), = engine.generate([long])
    assert len(a.token_ids) == 3 and len(b.token_ids) == 9
    assert b.token_ids[:3] == a.token_ids
    assert b.token_ids == b_alone.token_ids  # the finished rows left the batch and the KV cache
    assert max(abs(x - y) for x, y in zip(b.logprobs, b_alone.logprobs, strict=True)) < 1e-4


def test_seeded_sampling_is_reproducible_and_independent_of_the_batch():
    engine = tiny_engine(eos_token_ids=())
    prompt = prompts()[1]
    seeded = request(prompt, max_new_tokens=16, temperature=1.0, seed=42, n=3)
    alone = engine.generate([seeded])[0]
    mixed = engine.generate([request(prompts()[0], max_new_tokens=5, temperature=1.0), seeded])[1]
    assert [g.token_ids for g in alone] == [g.token_ids for g in mixed]
    assert len({g.token_ids for g in alone}) == 3  # the n samples use different streams


def test_the_context_window_ends_a_generation_with_context():
    engine = tiny_engine(eos_token_ids=(), max_context_length=40)
    prompt = prompts()[0]
    room = 40 - len(prompt)
    (generation,), = engine.generate([request(prompt, max_new_tokens=100, temperature=0.0)])
    assert len(generation.token_ids) == room and generation.finish_reason is FinishReason.CONTEXT
    (full,), = engine.generate([request(tuple(range(40)), max_new_tokens=5)])
    assert full.token_ids == () and full.finish_reason is FinishReason.CONTEXT


def test_max_new_tokens_0_returns_nothing():
    engine = tiny_engine()
    (generation,), = engine.generate([request(prompts()[0], max_new_tokens=0)])
    assert generation.token_ids == () and generation.finish_reason is FinishReason.LENGTH


def test_one_batched_call_is_much_faster_than_one_request_at_a_time():
    """16 prompts x 32 new tokens: the batch shares every forward pass (about 8x on 2 cores)."""
    import time

    engine = tiny_engine(eos_token_ids=())
    batch = [request(p, max_new_tokens=32, temperature=1.0, seed=i + 1)
             for i, p in enumerate(prompts() * 4)]
    engine.generate(batch[:2])  # warm-up
    started = time.perf_counter()
    together = engine.generate(batch)
    batched_s = time.perf_counter() - started
    started = time.perf_counter()
    alone = [engine.generate([req])[0] for req in batch]
    sequential_s = time.perf_counter() - started
    assert sum(len(g[0].token_ids) for g in together) == sum(len(g[0].token_ids) for g in alone) == 512
    assert [g[0].token_ids for g in together] == [g[0].token_ids for g in alone]  # seeded rows
    assert sequential_s > 2 * batched_s, (sequential_s, batched_s)
