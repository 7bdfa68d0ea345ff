"""Multi-turn RL through the five services: greedy held-out success rises after an SFT warm-up.

    .venv/bin/python bench/multiturn_rl.py                          # nim and guess_number, seeds 1-3
    .venv/bin/python bench/multiturn_rl.py --games nim --seeds 4 5 --scheduler 127.0.0.1:50051

Two built-in games, each with a deliberately mediocre scripted warm-up player
(bench/_multiturn_games.py):

* `nim` (a two-player game against the environment's scripted random opponent; take 1-3
  stones, taking the last one wins; an illegal or cut-off reply loses): the warm-up player
  follows a losing rule of thumb half the time and takes a random legal number otherwise, so
  the warm-up policy reads the pile and wins about half its games greedily (0.45-0.58). Target:
  greedy win rate on 64 held-out games up by >= 0.20 over the warm-up.
* `guess_number` (secret 1..7, three turns, higher/lower hints; binary search always finds it):
  the warm-up guesser ignores 40% of the hints. Target: greedy success on 64 held-out secrets
  up by >= 0.15 over the warm-up.

Per game and seed: a random-init tiny-llama gets an SFT warm-up on the player's transcripts,
then an RL job plays the real game from that checkpoint (the recipe below: the one the README's
multi-turn section recommends). The job evaluates greedily before its first step (= the warm-up
policy) and after its last; `eval/accuracy` is the game's `correct` (nim: a win).

The recipe: GRPO groups of 8 on one problem, per-turn advantages (DISCOUNTED_RETURN: each turn
compared with the same turn of its group; normalised by the group's std), a KL anchor to the
warm-up policy in the loss (k3, 0.1; `keep_reference`), gradient norm clipped at 1, lr 3e-4,
sampling at temperature 1 with a 6-token reply budget, and cut-off replies judged by the game
(the default `truncated_actions`: in nim a cut reply is an illegal move and loses), so rambling
to the limit never beats playing. Each game tunes a few fields (BenchGame.tuned; a flag still
wins): guess_number 300 steps; nim, whose episodes run up to 8 turns, 200 steps with the next
batch's rollouts overlapping the update (`async.max_staleness: 1`) and lr 5e-4.

PASS per game when, for at least `--need` seeds (default: all), the greedy success rose by at
least the target, the RL job took at most `--max-rl-minutes` (10), and the share of episodes
with a cut-off reply (`truncated`) stayed below 0.2 at every step (no collapse into replies that
never end). Prints per seed: greedy success before/after, train reward first/last window, the
largest per-step truncated share and RL seconds; JSON in runs/multiturn_rl/results.json.
tests/e2e/test_multiturn_pipeline.py runs this recipe for a few steps in CI (the pipeline, not
the claim).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from _multiturn_games import GAMES, BenchGame
from _private_stack import bench_stack

ROOT = Path(__file__).resolve().parents[1]
TRUNCATED_LIMIT = 0.2
DIAGNOSTICS = ("truncated", "grad_norm", "entropy", "kl", "response_tokens/mean", "env/illegal")


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """Everything a seed's run depends on besides the game and the seed."""

    model: str = "tiny-llama"
    warmup_chats: int = 3000
    sft_steps: int = 600
    sft_lr: float = 1e-3
    rl_steps: int = 100
    lr: float = 3e-4
    kl_coef: float = 0.1
    max_grad_norm: float = 1.0
    estimator: str = "DISCOUNTED_RETURN"
    aggregation: str = "SEQUENCE_MEAN"
    max_new_tokens: int = 6
    batch_size: int = 4
    group_size: int = 8
    eval_episodes: int = 64
    checkpoint_every: int = 0
    max_staleness: int = 0
    """async.max_staleness of the RL job: 0 = synchronous; 1 = the next batch's rollouts overlap
    the update."""


def recipe_for(game: BenchGame, base: Recipe, explicit: dict[str, object]) -> Recipe:
    """`base` with the game's tuned fields, then the fields given on the command line."""
    return replace(base, **{**game.tuned, **explicit})


@dataclass(frozen=True, kw_only=True)
class RunResult:
    game: str
    seed: int
    eval_before: float
    eval_after: float
    rewards: list[float]
    window: int
    rl_seconds: float
    diagnostics: dict[str, list[float]] = field(default_factory=dict)

    @property
    def gain(self) -> float:
        return self.eval_after - self.eval_before

    @property
    def max_truncated(self) -> float:
        return max(self.diagnostics.get("truncated") or [0.0])

    def reward_window(self, last: bool) -> float:
        part = self.rewards[-self.window:] if last else self.rewards[:self.window]
        return sum(part) / len(part) if part else 0.0


def sft_spec(data_path: str, seed: int, recipe: Recipe, game: BenchGame) -> dict:
    return {"type": "SFT", "display_name": f"{game.name}-warmup-{seed}", "dataset": {"path": data_path},
            "policy": {"model": {"builtin": {"name": recipe.model, "seed": seed}}, "adaptation": {"full": {}},
                       "algorithm": {"optimizer": {"learning_rate": recipe.sft_lr}}},
            "training": {"total_steps": recipe.sft_steps, "batch_size": 8, "seed": seed}}


def rl_spec(checkpoint_id: str, seed: int, recipe: Recipe, game: BenchGame) -> dict:
    kl = {"kl_coef": recipe.kl_coef, "kl_placement": "LOSS"} if recipe.kl_coef else {}
    overlap = {"async": {"max_staleness": recipe.max_staleness}} if recipe.max_staleness else {}
    return {"type": "RL", "display_name": f"{game.name}-rl-{seed}", **overlap,
            "environment": {"env_name": game.name, "config": {**game.config, "seed": seed}},
            "policy": {"model": {"checkpoint": {"checkpoint_id": checkpoint_id}},
                       "adaptation": {"full": {"keep_reference": bool(recipe.kl_coef)}},
                       "algorithm": {"optimizer": {"learning_rate": recipe.lr, "max_grad_norm": recipe.max_grad_norm},
                                     "loss": {"aggregation": recipe.aggregation, **kl},
                                     "advantage": {"estimator": recipe.estimator, "normalize_by_std": True}},
                       "sampling": {"max_new_tokens": recipe.max_new_tokens, "temperature": 1.0},
                       "limits": {"max_turns": game.max_turns}},
            "training": {"total_steps": recipe.rl_steps, "batch_size": recipe.batch_size,
                         "group_size": recipe.group_size, "eval_episodes": recipe.eval_episodes, "seed": seed,
                         "eval_every_steps": 0, "checkpoint_every_steps": recipe.checkpoint_every}}


def run_seed(scheduler: str, game: BenchGame, seed: int, out: Path, recipe: Recipe, *, window: int,
             api_key: str | None = None) -> RunResult:
    """SFT warm-up on the game's scripted player, then RL on the game itself."""
    from opentinker.client import SchedulerClient, ServiceClient

    out.mkdir(parents=True, exist_ok=True)
    data = out / f"warmup-{game.name}-{seed}.jsonl"
    data.write_text("".join(json.dumps(chat) + "\n" for chat in game.warmup(seed, recipe.warmup_chats)))
    scheduler_client = SchedulerClient(scheduler, api_key=api_key)
    client = ServiceClient(scheduler, api_key=api_key)
    sft = client.follow(scheduler_client.submit_job(sft_spec(str(data), seed, recipe, game)).job_id)
    if not sft.succeeded:
        raise RuntimeError(f"{game.name} seed {seed}: SFT warm-up failed: {sft.job.status_message}")
    started = time.perf_counter()
    rl = client.follow(scheduler_client.submit_job(rl_spec(sft.final_checkpoint_id, seed, recipe, game)).job_id)
    seconds = time.perf_counter() - started
    if not rl.succeeded:
        raise RuntimeError(f"{game.name} seed {seed}: RL failed: {rl.job.status_message}")
    evals = [v for _, v in rl.series("eval/accuracy")]
    return RunResult(game=game.name, seed=seed, eval_before=evals[0], eval_after=evals[-1],
                     rewards=[v for _, v in rl.series("reward/mean")], window=window, rl_seconds=seconds,
                     diagnostics={name: [v for _, v in rl.series(name)] for name in DIAGNOSTICS})


def passes(result: RunResult, game: BenchGame, max_rl_seconds: float) -> bool:
    return (result.gain >= game.target_gain and result.rl_seconds <= max_rl_seconds
            and result.max_truncated < TRUNCATED_LIMIT)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", nargs="+", choices=sorted(GAMES), default=["nim", "guess_number"])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--need", type=int, help="seeds per game that must pass (default: all)")
    p.add_argument("--max-rl-minutes", type=float, default=10.0)
    p.add_argument("--scheduler", help="an existing stack's scheduler (default: start a private stack)")
    p.add_argument("--base-port", type=int, default=41100, help="ports of the private stack")
    p.add_argument("--window", type=int, default=20, help="train-reward steps averaged at the start and the end")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "multiturn_rl")
    for item in fields(Recipe):
        default = getattr(Recipe(), item.name)
        p.add_argument(f"--{item.name.replace('_', '-')}", type=type(default), default=None,
                       help=f"recipe (default {default}, unless the game tunes it: _multiturn_games)")
    return p.parse_args(argv)


def print_table(results: list[RunResult], games: dict[str, BenchGame], max_rl_seconds: float) -> None:
    print(f"{'game':<13} {'seed':>4}  {'before':>6}  {'after':>6}  {'gain':>6}  {'target':>6}  "
          f"{'reward first':>12}  {'reward last':>11}  {'max cut':>7}  {'RL s':>5}  verdict")
    for r in results:
        game = games[r.game]
        print(f"{r.game:<13} {r.seed:>4}  {r.eval_before:>6.3f}  {r.eval_after:>6.3f}  {r.gain:>+6.3f}  "
              f"{game.target_gain:>+6.2f}  {r.reward_window(False):>12.3f}  {r.reward_window(True):>11.3f}  "
              f"{r.max_truncated:>7.3f}  {r.rl_seconds:>5.0f}  {'ok' if passes(r, game, max_rl_seconds) else 'MISS'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    explicit = {item.name: getattr(args, item.name) for item in fields(Recipe) if getattr(args, item.name) is not None}
    base = replace(Recipe(), **explicit)
    games = {name: GAMES[name](base.eval_episodes) for name in args.games}
    recipes = {name: recipe_for(game, base, explicit) for name, game in games.items()}
    need = args.need or len(args.seeds)
    max_rl_seconds = args.max_rl_minutes * 60
    results = []
    with bench_stack(args.scheduler, args.base_port, args.out / "stack") as stack:
        for game in games.values():
            for seed in args.seeds:
                result = run_seed(stack.scheduler, game, seed, args.out, recipes[game.name], window=args.window,
                                  api_key=stack.api_key)
                print(f"{game.name} seed {seed}: {game.what} {result.eval_before:.3f} -> {result.eval_after:.3f} "
                      f"in {result.rl_seconds:.0f} s of RL", file=sys.stderr, flush=True)
                results.append(result)
    print_table(results, games, max_rl_seconds)
    verdicts = {}
    for name, game in games.items():
        passing = sum(passes(r, game, max_rl_seconds) for r in results if r.game == name)
        verdicts[name] = "PASS" if passing >= need else "MISS"
        print(f"{name}: {passing}/{len(args.seeds)} seeds raised the {game.what} by >= {game.target_gain} "
              f"within {args.max_rl_minutes:g} min of RL without collapsing (need {need}): {verdicts[name]}")
    (args.out / "results.json").write_text(json.dumps(
        {"games": {name: {"config": g.config, "target_gain": g.target_gain, "recipe": asdict(recipes[name])}
                   for name, g in games.items()},
         "results": [asdict(r) | {"gain": r.gain, "max_truncated": r.max_truncated} for r in results],
         "verdicts": verdicts}, indent=2) + "\n")
    return 0 if all(v == "PASS" for v in verdicts.values()) else 1


def quick_recipe(**overrides: object) -> Recipe:
    """A small recipe for the CI pipeline test (the pipeline, not the claim)."""
    return replace(Recipe(warmup_chats=200, sft_steps=20, rl_steps=4, eval_episodes=8), **overrides)


if __name__ == "__main__":
    sys.exit(main())
