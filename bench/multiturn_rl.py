"""Multi-turn RL through the five services: `guess_number` with higher/lower hints, reward rises.

    .venv/bin/python bench/multiturn_rl.py                  # own stack, seeds 1-3, ~8 min
    .venv/bin/python bench/multiturn_rl.py --seeds 4 5 --rl-steps 150 --scheduler 127.0.0.1:50051

Per seed: a random-init tiny-llama gets an SFT warm-up on transcripts of a scripted player
who answers one number per turn and, after a hint, guesses inside the interval the hints
still allow with probability `--follow` (uniformly inside it; otherwise anywhere in 1..N).
GRPO then plays the real game: the secret is 1..N, a guess gets "higher" or "lower", the
episode ends at "correct" or after `max_turns`. The reward is 1 for finding the secret plus
the game's dense shaping for narrowing the interval, so a policy that uses every hint and
halves the interval (binary search: 1.2 on 1..4 in three turns) earns more than the warm-up
player (~0.95 at follow 0.8). Advantages are per turn (DISCOUNTED_RETURN: each turn compared
with the same turn of its group), the loss keeps a KL term to the warm-up policy and the
gradient norm is clipped at 1: without the KL term a seed could drift into replies that
never end (cut by the token limit, reward 0 for every episode, so no gradient is left).

Prints, per seed, the mean episode reward and success rate of the first and last `--window`
RL steps and the greedy eval reward on 32 held-out episodes before and after RL; PASS when
the train reward rose by at least `--min-gain` for at least `--need` seeds.
tests/e2e/test_multiturn_pipeline.py runs this recipe for 4 RL steps in CI (the pipeline, not the claim).

Measured (2026-11-22, 2-core CPU, defaults, 60 RL steps of 4 x 8 episodes): see
docs/decisions.md ("Multi-turn RL that learns").
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from _private_stack import bench_stack

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = "Guess the number. Reply with a number only."


@dataclass(frozen=True, kw_only=True)
class GameConfig:
    low: int = 1
    high: int = 4
    max_turns: int = 3

    def env(self, seed: int) -> dict:
        # penalty 0: wasted guesses already earn no shaping; with a penalty, ending a turn by
        # the token limit (reward 0, no environment step) would beat guessing wrong
        return {"env_name": "guess_number",
                "config": {"low": self.low, "high": self.high, "max_turns": self.max_turns, "seed": seed,
                           "penalty": 0.0}}


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """Everything a seed's run depends on besides the seed."""

    game: GameConfig = field(default_factory=GameConfig)
    model: str = "tiny-llama"
    follow: float = 0.8
    warmup_chats: int = 3000
    sft_steps: int = 600
    sft_lr: float = 1e-3
    rl_steps: int = 80
    lr: float = 3e-4
    kl_coef: float = 0.1
    max_grad_norm: float = 1.0
    estimator: str = "DISCOUNTED_RETURN"
    aggregation: str = "SEQUENCE_MEAN"
    max_new_tokens: int = 6
    batch_size: int = 4
    group_size: int = 8
    checkpoint_every: int = 0


@dataclass(frozen=True, kw_only=True)
class RunResult:
    seed: int
    rewards: list[float]
    accuracies: list[float]
    window: int
    seconds: float
    eval_before: float
    eval_after: float
    diagnostics: dict[str, list[float]]

    def mean(self, values: list[float], last: bool) -> float:
        part = values[-self.window:] if last else values[:self.window]
        return sum(part) / len(part)

    @property
    def gain(self) -> float:
        return self.mean(self.rewards, True) - self.mean(self.rewards, False)


DIAGNOSTICS = ("truncated", "grad_norm", "entropy", "kl", "response_tokens/mean")


def warmup_transcripts(game: GameConfig, count: int, seed: int, follow: float) -> list[dict]:
    """Chats of a player who, on each guess after a hint, follows it with probability `follow`
    (a guess the hints still allow) and otherwise guesses uniformly at random."""
    rng = random.Random(seed)
    chats = []
    for _ in range(count):
        secret = rng.randint(game.low, game.high)
        low, high = game.low, game.high
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"Guess {game.low} to {game.high}."}]
        for turn in range(game.max_turns):
            hinted = turn > 0 and rng.random() < follow
            guess = rng.randint(low, high) if hinted else rng.randint(game.low, game.high)
            low, high = (max(low, guess + 1), high) if guess < secret else (low, min(high, guess - 1))
            messages.append({"role": "assistant", "content": str(guess)})
            if guess == secret or turn == game.max_turns - 1:
                break
            messages.append({"role": "user", "content": "higher" if guess < secret else "lower"})
        chats.append({"messages": messages})
    return chats


def sft_spec(data_path: str, seed: int, recipe: Recipe) -> dict:
    return {"type": "SFT", "dataset": {"path": data_path},
            "policy": {"model": {"builtin": {"name": recipe.model, "seed": seed}}, "adaptation": {"full": {}},
                       "algorithm": {"optimizer": {"learning_rate": recipe.sft_lr}}},
            "training": {"total_steps": recipe.sft_steps, "batch_size": 8, "seed": seed}}


def rl_spec(checkpoint_id: str, seed: int, recipe: Recipe) -> dict:
    kl = {"kl_coef": recipe.kl_coef, "kl_placement": "LOSS"} if recipe.kl_coef else {}
    return {"type": "RL", "environment": recipe.game.env(seed),
            "policy": {"model": {"checkpoint": {"checkpoint_id": checkpoint_id}},
                       "adaptation": {"full": {"keep_reference": bool(recipe.kl_coef)}},
                       "algorithm": {"optimizer": {"learning_rate": recipe.lr, "max_grad_norm": recipe.max_grad_norm},
                                     "loss": {"aggregation": recipe.aggregation, **kl},
                                     "advantage": {"estimator": recipe.estimator, "normalize_by_std": True}},
                       "sampling": {"max_new_tokens": recipe.max_new_tokens, "temperature": 1.0},
                       "limits": {"max_turns": recipe.game.max_turns}},
            "training": {"total_steps": recipe.rl_steps, "batch_size": recipe.batch_size,
                         "group_size": recipe.group_size, "eval_episodes": 32, "seed": seed,
                         "checkpoint_every_steps": recipe.checkpoint_every}}


def run_seed(scheduler: str, seed: int, out: Path, recipe: Recipe, *, window: int,
             api_key: str | None = None) -> RunResult:
    """SFT warm-up, then RL on guess_number; the per-step train reward and success rate."""
    from opentinker.client import SchedulerClient, ServiceClient

    out.mkdir(parents=True, exist_ok=True)
    data = out / f"warmup-{seed}.jsonl"
    chats = warmup_transcripts(recipe.game, recipe.warmup_chats, seed, recipe.follow)
    data.write_text("".join(json.dumps(chat) + "\n" for chat in chats))
    scheduler_client = SchedulerClient(scheduler, api_key=api_key)
    client = ServiceClient(scheduler, api_key=api_key)
    sft = client.follow(scheduler_client.submit_job(sft_spec(str(data), seed, recipe)).job_id)
    if not sft.succeeded:
        raise RuntimeError(f"seed {seed}: SFT warm-up failed: {sft.job.status_message}")
    started = time.perf_counter()
    rl = client.follow(scheduler_client.submit_job(rl_spec(sft.final_checkpoint_id, seed, recipe)).job_id)
    if not rl.succeeded:
        raise RuntimeError(f"seed {seed}: RL failed: {rl.job.status_message}")
    evals = [v for _, v in rl.series("eval/reward/mean")]
    return RunResult(seed=seed, rewards=[v for _, v in rl.series("reward/mean")],
                     accuracies=[v for _, v in rl.series("accuracy")], window=window,
                     seconds=time.perf_counter() - started, eval_before=evals[0], eval_after=evals[-1],
                     diagnostics={name: [v for _, v in rl.series(name)] for name in DIAGNOSTICS})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--scheduler", help="an existing stack's scheduler (default: start a private stack)")
    p.add_argument("--base-port", type=int, default=41100, help="ports of the private stack")
    p.add_argument("--window", type=int, default=20, help="steps averaged at the start and the end")
    p.add_argument("--high", type=int, default=4, help="secrets are 1..high")
    p.add_argument("--max-turns", type=int, default=3)
    p.add_argument("--min-gain", type=float, default=0.05)
    p.add_argument("--need", type=int, default=2, help="seeds that must gain")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "multiturn_rl")
    for item in fields(Recipe):
        if item.name != "game":
            p.add_argument(f"--{item.name.replace('_', '-')}", type=type(getattr(Recipe(), item.name)),
                           default=getattr(Recipe(), item.name), help=f"recipe (default %(default)s)")
    return p.parse_args(argv)


def recipe_from(args: argparse.Namespace) -> Recipe:
    chosen = {item.name: getattr(args, item.name) for item in fields(Recipe) if item.name != "game"}
    return Recipe(game=GameConfig(high=args.high, max_turns=args.max_turns), **chosen)


def print_table(results: list[RunResult]) -> None:
    print(f"{'seed':>4}  {'reward first':>12}  {'reward last':>11}  {'gain':>6}  {'success first':>13}  "
          f"{'success last':>12}  {'eval before':>11}  {'eval after':>10}  {'RL s':>5}")
    for r in results:
        print(f"{r.seed:>4}  {r.mean(r.rewards, False):>12.3f}  {r.mean(r.rewards, True):>11.3f}  "
              f"{r.gain:>+6.3f}  {r.mean(r.accuracies, False):>13.3f}  {r.mean(r.accuracies, True):>12.3f}  "
              f"{r.eval_before:>11.3f}  {r.eval_after:>10.3f}  {r.seconds:>5.0f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recipe = recipe_from(args)
    with bench_stack(args.scheduler, args.base_port, args.out / "stack") as stack:
        results = [run_seed(stack.scheduler, seed, args.out, recipe, window=args.window, api_key=stack.api_key)
                   for seed in args.seeds]
    print_table(results)
    passing = sum(r.gain >= args.min_gain for r in results)
    verdict = "PASS" if passing >= args.need else "MISS"
    print(f"{passing}/{len(results)} seeds raised the mean train reward by >= {args.min_gain} "
          f"(first vs last {args.window} of {recipe.rl_steps} steps; need {args.need}): {verdict}")
    (args.out / "results.json").write_text(json.dumps(
        {"recipe": asdict(recipe), "results": [asdict(r) | {"gain": r.gain} for r in results],
         "verdict": verdict}, indent=2) + "\n")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
