"""Multi-turn RL through the five services: `guess_number` with higher/lower hints, reward rises.

    .venv/bin/python bench/multiturn_rl.py                  # own stack, 3 seeds, ~6 min
    .venv/bin/python bench/multiturn_rl.py --seeds 1 --rl-steps 20 --scheduler 127.0.0.1:50051

Per seed: a random-init tiny model gets an SFT warm-up on transcripts of a player who answers
with one number per turn and follows each hint only with probability `--follow` (0 = a
format-only warm-up), then GRPO plays the real game: the secret is 1..N, a guess gets "higher"
or "lower", the episode ends at "correct" or after `max_turns`. The reward is 1 for finding the
secret plus the game's dense shaping for narrowing the range (wasted guesses cost nothing here:
with a penalty, a policy learned to end its turns by the token limit, which scores 0), so a
policy that uses the hints earns more. Prints, per seed, the mean episode reward and success
rate of the first and last `--window` RL steps, and PASS when the reward rose by at least
`--min-gain` for at least `--need` seeds.

Status (2026-11-22): MISS, 1 of 3 seeds. tiny-llama, secret 1..4, three turns, SFT 300 steps
(lr 1e-3, half of the hints followed), GRPO 150 steps of 4 x 8 episodes at lr 5e-4, up to 6 new
tokens a turn: seed 1 rises from 0.74 to 0.87 mean reward (success 0.55 -> 0.67; +0.116 and
+0.127 in two runs), seed 2 finds the secret more often (0.61 -> 0.68) but its reward falls to
0.51, seed 3 starts at 0.19 (its warm-up often runs past the token limit) and collapses to 0.
Earlier tries with tiny-qwen2, lr 3e-4..1e-2 and 30-150 steps stayed flat or collapsed. The
warm-up does not make the policy follow hints (success stays at the random player's ~0.55), and
episodes cut by the token limit score 0, a floor that a drifting policy falls to. Multi-turn
trajectories are scored identically by Rollout and Trainer (tests/e2e/test_logprob_contract.py),
so the pipeline is consistent; the schedule and the model are what is left to work out. Not in
CI yet.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "opentinker.cli.main"]


@dataclass(frozen=True, kw_only=True)
class GameConfig:
    low: int = 1
    high: int = 4
    max_turns: int = 3

    def env(self, seed: int) -> dict:
        # penalty 0: an episode cut off by the token limit scores 0, so with penalised wasted
        # guesses the policy learns to say nothing rather than guess (reward hacking, seen)
        return {"env_name": "guess_number",
                "config": {"low": self.low, "high": self.high, "max_turns": self.max_turns, "seed": seed,
                           "penalty": 0.0}}


@dataclass(frozen=True, kw_only=True)
class RunResult:
    seed: int
    rewards: list[float]
    accuracies: list[float]
    window: int
    seconds: float

    def mean(self, values: list[float], last: bool) -> float:
        part = values[-self.window:] if last else values[:self.window]
        return sum(part) / len(part)

    @property
    def gain(self) -> float:
        return self.mean(self.rewards, True) - self.mean(self.rewards, False)


def warmup_transcripts(game: GameConfig, count: int, seed: int, follow: float) -> list[dict]:
    """Chats of a player who, on each guess after a hint, follows it with probability `follow`
    (a guess the hints still allow) and otherwise guesses uniformly at random."""
    rng = random.Random(seed)
    system = "Guess the number. Reply with a number only."
    chats = []
    for _ in range(count):
        secret = rng.randint(game.low, game.high)
        low, high = game.low, game.high
        messages = [{"role": "system", "content": system},
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


def sft_spec(data_path: str, seed: int, steps: int, model: str = "tiny-llama", lr: float = 1e-3) -> dict:
    return {"type": "SFT", "dataset": {"path": data_path},
            "policy": {"model": {"builtin": {"name": model, "seed": seed}}, "adaptation": {"full": {}},
                       "algorithm": {"optimizer": {"learning_rate": lr}}},
            "training": {"total_steps": steps, "batch_size": 8, "seed": seed}}


def rl_spec(checkpoint_id: str, game: GameConfig, seed: int, steps: int, lr: float) -> dict:
    return {"type": "RL", "environment": game.env(seed),
            "policy": {"model": {"checkpoint": {"checkpoint_id": checkpoint_id}}, "adaptation": {"full": {}},
                       "algorithm": {"optimizer": {"learning_rate": lr},
                                     "advantage": {"normalize_by_std": True}},
                       "sampling": {"max_new_tokens": 6, "temperature": 1.0},
                       "limits": {"max_turns": game.max_turns}},
            "training": {"total_steps": steps, "batch_size": 4, "group_size": 8, "eval_episodes": 4,
                         "seed": seed}}


def run_seed(scheduler: str, seed: int, out: Path, *, game: GameConfig, sft_steps: int, rl_steps: int,
             lr: float, window: int, follow: float, model: str = "tiny-llama", sft_lr: float = 1e-3,
             api_key: str | None = None) -> RunResult:
    """SFT warm-up, then GRPO on guess_number; the per-step mean reward and success rate."""
    from opentinker.client import SchedulerClient, ServiceClient

    out.mkdir(parents=True, exist_ok=True)
    data = out / f"warmup-{seed}.jsonl"
    data.write_text("".join(json.dumps(chat) + "\n" for chat in warmup_transcripts(game, 400, seed, follow)))
    scheduler_client = SchedulerClient(scheduler, api_key=api_key)
    client = ServiceClient(scheduler, api_key=api_key)
    sft = client.follow(scheduler_client.submit_job(sft_spec(str(data), seed, sft_steps, model, sft_lr)).job_id)
    if not sft.succeeded:
        raise SystemExit(f"seed {seed}: SFT warm-up failed: {sft.job.status_message}")
    started = time.perf_counter()
    rl = client.follow(scheduler_client.submit_job(
        rl_spec(sft.final_checkpoint_id, game, seed, rl_steps, lr)).job_id)
    if not rl.succeeded:
        raise SystemExit(f"seed {seed}: RL failed: {rl.job.status_message}")
    return RunResult(seed=seed, rewards=[v for _, v in rl.series("reward/mean")],
                     accuracies=[v for _, v in rl.series("accuracy")], window=window,
                     seconds=time.perf_counter() - started)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--scheduler", help="an existing stack's scheduler (default: start a private stack)")
    p.add_argument("--base-port", type=int, default=52100, help="ports of the private stack")
    p.add_argument("--model", default="tiny-llama", help="built-in model (tiny-llama, tiny-qwen2)")
    p.add_argument("--sft-steps", type=int, default=300)
    p.add_argument("--sft-lr", type=float, default=1e-3)
    p.add_argument("--rl-steps", type=int, default=150)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--window", type=int, default=25, help="steps averaged at the start and the end")
    p.add_argument("--high", type=int, default=4, help="secrets are 1..high")
    p.add_argument("--max-turns", type=int, default=3)
    p.add_argument("--follow", type=float, default=0.5,
                   help="warm-up: how often the demonstrated player follows a hint (0: never)")
    p.add_argument("--min-gain", type=float, default=0.08)
    p.add_argument("--need", type=int, default=2, help="seeds that must gain")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "multiturn_rl")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    game = GameConfig(high=args.high, max_turns=args.max_turns)
    state_dir = args.out / "stack"
    api_key = None
    if not args.scheduler:
        subprocess.run([*CLI, "up", "--state-dir", str(state_dir), "--base-port", str(args.base_port),
                        "--redis-port", str(args.base_port + 10)], check=True, stdout=subprocess.DEVNULL,
                       env={k: v for k, v in os.environ.items() if k != "OPENTINKER_API_KEY"})
        api_key = (state_dir / "admin.key").read_text().strip()
    scheduler = args.scheduler or f"127.0.0.1:{args.base_port}"
    try:
        results = [run_seed(scheduler, seed, args.out, game=game, sft_steps=args.sft_steps,
                            rl_steps=args.rl_steps, lr=args.lr, window=args.window, follow=args.follow,
                            model=args.model, sft_lr=args.sft_lr, api_key=api_key)
                   for seed in args.seeds]
    finally:
        if not args.scheduler:
            subprocess.run([*CLI, "down", "--state-dir", str(state_dir)], check=False, stdout=subprocess.DEVNULL)
    print(f"{'seed':>4}  {'reward first':>12}  {'reward last':>11}  {'gain':>6}  {'success first':>13}  "
          f"{'success last':>12}  {'RL s':>5}")
    for r in results:
        print(f"{r.seed:>4}  {r.mean(r.rewards, False):>12.3f}  {r.mean(r.rewards, True):>11.3f}  {r.gain:>+6.3f}  "
              f"{r.mean(r.accuracies, False):>13.3f}  {r.mean(r.accuracies, True):>12.3f}  {r.seconds:>5.0f}")
    passing = sum(r.gain >= args.min_gain for r in results)
    verdict = "PASS" if passing >= args.need else "MISS"
    print(f"{passing}/{len(results)} seeds raised the mean episode reward by >= {args.min_gain} "
          f"(first vs last {args.window} of {args.rl_steps} steps; need {args.need}): {verdict}")
    (args.out / "results.json").write_text(json.dumps(
        {"game": game.__dict__, "results": [r.__dict__ | {"gain": r.gain} for r in results],
         "verdict": verdict}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
