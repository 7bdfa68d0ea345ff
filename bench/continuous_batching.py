"""Continuous vs static batching in the Rollout's generation scheduler, same work, same run.

    .venv/bin/python bench/continuous_batching.py                   # CPU, tiny-llama sizes
    python bench/continuous_batching.py --device cuda --hidden 1024 --layers 16 --dtype bfloat16

What runs, in this process: `--episodes` simulated multi-turn episodes share one
`GenerationBatcher` over one `TransformersEngine`. Each episode generates an action (seeded:
sample seeds derive from the episode and turn, so both schedulers produce exactly the same
tokens), waits for its "environment" (a random delay in [0, --delay-ms] from a seeded
generator, the same in both), appends a short observation and generates again, for
`--turns` turns or until an action is cut by the token limit. Actions stop on eos or one of
sixteen letters (mean length ~15 tokens, at most --max-new-tokens).

Targets: `continuous` (the engine's step-level `advance`: rows join and leave the running
batch at every step) and `static` (`WholeBatchEngine`: a batch decodes to its longest row
before the next starts). Rounds alternate the order; medians are reported with the ratio.
The model is a Llama built from a config (random weights, the byte-level tokenizer): only
its size matters here. Results: a table on stdout, JSON in bench/results/continuous_batching.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from opentinker_runtime.ml.chat import encode, render_prompt
from opentinker_runtime.ml.tokenizer import build_byte_tokenizer
from opentinker_rollout.batcher import GenerationBatcher, WholeBatchEngine
from opentinker_rollout.engine import GenerationRequest, SamplingConfig, derive_seed
from opentinker_rollout.transformers_engine import TransformersEngine

BENCH_DIR = Path(__file__).resolve().parent
EOS = 259
STOP_TOKEN_IDS = tuple(range(97, 113))


@dataclass(frozen=True, kw_only=True)
class Config:
    device: str
    dtype: str
    hidden: int
    layers: int
    episodes: int
    turns: int
    max_new_tokens: int
    delay_ms: float
    rounds: int
    max_batch_size: int
    out: Path


def parse_args(argv: list[str] | None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-batch-size", type=int, default=128)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "continuous_batching.json")
    args = parser.parse_args(argv)
    return Config(**{key.replace("-", "_"): value for key, value in vars(args).items()})


def build_engine(config: Config) -> TransformersEngine:
    tokenizer = build_byte_tokenizer()
    heads = max(1, config.hidden // 64)
    model_config = LlamaConfig(vocab_size=260, hidden_size=config.hidden, intermediate_size=3 * config.hidden,
                               num_hidden_layers=config.layers, num_attention_heads=heads,
                               num_key_value_heads=heads, max_position_embeddings=1024,
                               pad_token_id=256, bos_token_id=257, eos_token_id=EOS)
    torch.manual_seed(0)
    model = LlamaForCausalLM(model_config).to(device=config.device, dtype=getattr(torch, config.dtype)).eval()
    return TransformersEngine(model, tokenizer)


async def play_episode(batcher: GenerationBatcher, prompt: list[int], observation: list[int],
                       index: int, config: Config) -> tuple[int, int]:
    """(turns played, tokens generated) of one simulated episode."""
    delays = random.Random(index)
    context, generated = list(prompt), 0
    for turn in range(config.turns):
        sampling = SamplingConfig(max_new_tokens=config.max_new_tokens, temperature=1.0,
                                  stop_token_ids=STOP_TOKEN_IDS, seed=derive_seed(1234, index, turn))
        answer = await batcher.generate(GenerationRequest(prompt_ids=tuple(context), sampling=sampling))
        action = answer.generations[0].token_ids
        context += action
        generated += len(action)
        if not action or action[-1] not in (EOS, *STOP_TOKEN_IDS):
            return turn + 1, generated
        await asyncio.sleep(delays.uniform(0, config.delay_ms) / 1000.0)
        context += observation
    return config.turns, generated


async def measure(engine: TransformersEngine, continuous: bool, config: Config) -> dict[str, float]:
    tokenizer = engine.tokenizer
    prompts = [render_prompt(tokenizer, [{"role": "system", "content": "Reply briefly."},
                                         {"role": "user", "content": f"Round {i}."}])
               for i in range(config.episodes)]
    observation = encode(tokenizer, "<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n")
    batcher = GenerationBatcher(engine if continuous else WholeBatchEngine(engine),
                                max_batch_size=config.max_batch_size)
    started = time.perf_counter()
    results = await asyncio.gather(*(play_episode(batcher, prompt, observation, i, config)
                                     for i, prompt in enumerate(prompts)))
    seconds = time.perf_counter() - started
    await batcher.close()
    turns, tokens = (sum(column) for column in zip(*results, strict=True))
    return {"seconds": seconds, "episodes_per_s": config.episodes / seconds, "tokens_per_s": tokens / seconds,
            "tokens": tokens, "turns": turns, "engine_steps": batcher.stats.engine_calls}


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    engine = build_engine(config)
    asyncio.run(measure(engine, True, Config(**{**asdict(config), "episodes": 4})))  # warm-up
    runs: dict[str, list[dict[str, float]]] = {"continuous": [], "static": []}
    for round_index in range(config.rounds):
        order = ("continuous", "static") if round_index % 2 == 0 else ("static", "continuous")
        for name in order:
            result = asyncio.run(measure(engine, name == "continuous", config))
            runs[name].append(result)
            print(f"round {round_index + 1} {name:10s} {result['episodes_per_s']:7.2f} episodes/s "
                  f"{result['tokens_per_s']:9.1f} tokens/s {result['engine_steps']:5.0f} engine calls",
                  file=sys.stderr, flush=True)
    if {r["tokens"] for rs in runs.values() for r in rs} != {runs["static"][0]["tokens"]}:
        print("the two schedulers generated different tokens: the comparison is void", file=sys.stderr)
        return 1
    summary = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in runs.items()}
    ratio = summary["continuous"]["tokens_per_s"] / summary["static"]["tokens_per_s"]
    print(f"\n{config.episodes} episodes x {config.turns} turns, env delay 0-{config.delay_ms:g} ms, "
          f"Llama {config.hidden}x{config.layers} {config.dtype} on {config.device}")
    for name, row in summary.items():
        print(f"{name:11s}{row['episodes_per_s']:9.2f} episodes/s{row['tokens_per_s']:10.1f} tokens/s"
              f"{row['engine_steps']:8.0f} engine calls")
    print(f"continuous / static throughput: {ratio:.2f}x (same tokens: {int(summary['static']['tokens'])})")
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps({"config": {k: str(v) for k, v in asdict(config).items()},
                                      "summary": summary, "ratio": ratio, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
