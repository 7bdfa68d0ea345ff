"""Throughput of batched generation vs one request at a time, on the builtin tiny model; or
the engine's CPU per token against `model.generate` on the same batch.

    .venv/bin/python bench/generation.py [--episodes 16] [--tokens 32]
    .venv/bin/python bench/generation.py --vs-generate [--prompts 8] [--group 8]

Each of the episodes asks the batcher for `tokens` new tokens (eos disabled, so every
generation has exactly that length): once all concurrently (they share engine calls), once
awaited one after another (one engine call each).

--vs-generate: `prompts` distinct prompts x `group` samples each (a GRPO step's shape), sampled
at temperature 1 for exactly `tokens` new tokens by the engine (`TransformersEngine.generate`)
and by transformers' `model.generate` on the same left-padded rows; prints the median wall
and CPU time (this process, all threads) of --repeats runs each, with --threads torch threads.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

import torch

from opentinker_runtime.ml.chat import render_prompt
from opentinker_runtime.ml.models import load_model
from opentinker_runtime.ml.sources import ModelSource
from opentinker_rollout.batcher import GenerationBatcher
from opentinker_rollout.decode_batch import left_pad
from opentinker_rollout.engine import GenerationRequest, SamplingConfig
from opentinker_rollout.transformers_engine import TransformersEngine


def requests(tokenizer: object, episodes: int, tokens: int) -> list[GenerationRequest]:
    prompts = [render_prompt(tokenizer, [{"role": "system", "content": "Solve it."},
                                         {"role": "user", "content": f"What is {i} + {3 * i}?"}])
               for i in range(episodes)]
    return [GenerationRequest(prompt_ids=tuple(p),
                              sampling=SamplingConfig(max_new_tokens=tokens, temperature=1.0, seed=i + 1))
            for i, p in enumerate(prompts)]


async def measure(batcher: GenerationBatcher, batch: list[GenerationRequest],
                  concurrent: bool) -> tuple[int, float]:
    started = time.perf_counter()
    if concurrent:
        answers = await asyncio.gather(*(batcher.generate(r) for r in batch))
    else:
        answers = [await batcher.generate(r) for r in batch]
    seconds = time.perf_counter() - started
    return sum(len(a.generations[0].token_ids) for a in answers), seconds


async def main(episodes: int, tokens: int, model: str) -> None:
    loaded = load_model(ModelSource.builtin(model, 0))
    engine = TransformersEngine(loaded.model, loaded.tokenizer, eos_token_ids=())
    batcher = GenerationBatcher(engine, max_batch_size=episodes)
    batch = requests(loaded.tokenizer, episodes, tokens)
    await measure(batcher, batch[:2], concurrent=True)  # warm-up
    print(f"{model}, {episodes} episodes x {tokens} new tokens, torch threads {torch.get_num_threads()}")
    for label, concurrent in (("batched", True), ("one at a time", False)):
        generated, seconds = await measure(batcher, batch, concurrent)
        print(f"  {label:>13}: {generated} tokens in {seconds:.3f} s = {generated / seconds:,.0f} tokens/s"
              f" ({batcher.stats.engine_calls} engine calls so far)")
    await batcher.close()


def timed(run: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `repeats` runs (after one warm-up run)."""
    run()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def vs_generate(model_name: str, prompts: int, group: int, tokens: int, repeats: int) -> None:
    loaded = load_model(ModelSource.builtin(model_name, 0))
    engine = TransformersEngine(loaded.model, loaded.tokenizer, eos_token_ids=())
    batch = [GenerationRequest(prompt_ids=r.prompt_ids, sampling=SamplingConfig(
        max_new_tokens=tokens, temperature=1.0, seed=i + 1, n=group))
        for i, r in enumerate(requests(loaded.tokenizer, prompts, tokens))]
    input_ids, attention, _ = left_pad([r.prompt_ids for r in batch for _ in range(group)], 0)

    def hf_generate() -> None:
        with torch.inference_mode():
            loaded.model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True,
                                  temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=tokens,
                                  min_new_tokens=tokens, pad_token_id=0, eos_token_id=None)

    generated = prompts * group * tokens
    print(f"{model_name}: {prompts} prompts x {group} samples x {tokens} new tokens = {generated} tokens, "
          f"torch threads {torch.get_num_threads()}, median of {repeats}")
    for label, run in (("engine", lambda: engine.generate(batch)), ("model.generate", hf_generate)):
        wall, cpu = timed(run, repeats)
        print(f"  {label:>14}: {wall * 1000:7.1f} ms wall, {cpu * 1000:7.1f} ms CPU = "
              f"{cpu / generated * 1e6:6.1f} us CPU per token")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--vs-generate", action="store_true",
                        help="the engine against model.generate on one GRPO-shaped batch")
    parser.add_argument("--prompts", type=int, default=8, help="--vs-generate: distinct prompts")
    parser.add_argument("--group", type=int, default=8, help="--vs-generate: samples per prompt")
    parser.add_argument("--repeats", type=int, default=5, help="--vs-generate: timed runs per side")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.vs_generate:
        vs_generate(args.model, args.prompts, args.group, args.tokens, args.repeats)
    else:
        asyncio.run(main(args.episodes, args.tokens, args.model))
