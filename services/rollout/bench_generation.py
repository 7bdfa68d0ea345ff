"""Throughput of batched generation vs one request at a time, on the builtin tiny model.

    .venv/bin/python services/rollout/bench_generation.py [--episodes 16] [--tokens 32]

Each of the episodes asks the batcher for `tokens` new tokens (eos disabled, so every
generation has exactly that length): once all concurrently (they share engine calls), once
awaited one after another (one engine call each).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import torch

from opentinker.ml.chat import render_prompt
from opentinker.ml.models import load_model
from opentinker.ml.sources import ModelSource
from opentinker_rollout.batcher import GenerationBatcher
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--model", default="tiny-llama")
    args = parser.parse_args()
    asyncio.run(main(args.episodes, args.tokens, args.model))
