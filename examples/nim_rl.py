"""Multi-turn RL that works, in one script: an SFT warm-up, then RL on `nim` with the recipe.

    opentinker up
    python examples/nim_rl.py --seed 1            # ~15 min on 2 CPU cores

`nim` is a built-in two-player game: take 1-3 stones, taking the last one wins, against the
environment's scripted random opponent; an illegal reply loses at once, and so does a reply the
token limit cuts off (the game's default `on_truncated` is its `step`: it is judged like any
other reply). The script:

1. writes transcripts of a mediocre player (a losing rule of thumb half the time, random legal
   moves otherwise) and warms the built-in tiny-llama up on them with SFT: the model learns the
   format and to read the pile, and plays badly;
2. runs RL from that checkpoint with the multi-turn recipe of the README: per-turn advantages
   (DISCOUNTED_RETURN), a KL anchor to the warm-up policy, gradient norm clipped at 1, and for
   nim's longer episodes lr 5e-4 with the next batch's rollouts overlapping the update
   (`asynchronous={"max_staleness": 1}`), 200 steps;
3. prints, per step, the reward, the game's own `env/win` and the `truncated` share (a jump to 1
   would be a policy that stopped ending its replies), and the greedy win rate on 64 held-out
   games before and after RL.

bench/multiturn_rl.py runs the same recipe over several seeds and checks it.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from opentinker.client import ServiceClient
from opentinker_runtime.games.nim_game import DEFAULT_SYSTEM_PROMPT, NimGame

GAME = {"min_stones": 7, "max_stones": 15, "max_take": 3, "eval_size": 64}


def warmup_chats(seed: int, count: int) -> list[dict]:
    """Games of a player who leaves two more than a multiple of four (a losing rule) half the
    time and takes a random legal number otherwise."""
    rng, game = random.Random(seed), NimGame(**GAME, seed=10_000 + seed)
    chats = []
    for index in range(count):
        messages = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                    {"role": "user", "content": game.reset(index=index)}]
        while True:
            legal = min(3, game.stones)
            take = min((game.stones + 2) % 4 or 1, legal) if rng.random() < 0.5 else rng.randint(1, legal)
            result = game.step(str(take))
            messages.append({"role": "assistant", "content": str(take)})
            if result.done:
                break
            messages.append({"role": "user", "content": result.observation})
        chats.append({"messages": messages})
    return chats


def rl_arguments(checkpoint_id: str, seed: int, steps: int) -> dict:
    """`fit` arguments of the RL job: the multi-turn recipe."""
    return dict(
        env={"env_name": "nim", "config": {**GAME, "seed": seed}},
        model={"checkpoint": {"checkpoint_id": checkpoint_id}}, name=f"nim-rl-{seed}",
        num_steps=steps, batch_size=4, group_size=8,
        adaptation={"full": {"keep_reference": True}},                       # the KL anchor's reference
        asynchronous={"max_staleness": 1},              # rollouts of the next batch overlap the update
        algorithm={"optimizer": {"learning_rate": 5e-4, "max_grad_norm": 1.0},
                   "loss": {"aggregation": "SEQUENCE_MEAN", "kl_coef": 0.1, "kl_placement": "LOSS"},
                   "advantage": {"estimator": "DISCOUNTED_RETURN", "normalize_by_std": True}},
        sampling={"max_new_tokens": 6, "temperature": 1.0},
        limits={"max_turns": 8},                      # cut-off replies: judged by the game (default)
        training={"eval_episodes": 64, "eval_every_steps": 0, "seed": seed})


def show(step: int, metrics: dict[str, float]) -> None:
    if "reward/mean" in metrics:
        print(f"step {step:3d}  reward {metrics['reward/mean']:+.2f}  win {metrics.get('env/win', 0):.2f}  "
              f"truncated {metrics.get('truncated', 0):.2f}  kl {metrics.get('kl', 0):.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scheduler", default="127.0.0.1:50051")
    parser.add_argument("--rl-steps", type=int, default=200)
    args = parser.parse_args()
    client = ServiceClient(args.scheduler)
    data = Path(tempfile.mkdtemp()) / "nim-warmup.jsonl"
    data.write_text("".join(json.dumps(chat) + "\n" for chat in warmup_chats(args.seed, 3000)))
    warm = client.fit(dataset=str(data), model={"builtin": {"name": "tiny-llama", "seed": args.seed}},
                      num_steps=600, batch_size=8, name=f"nim-warmup-{args.seed}",
                      algorithm={"optimizer": {"learning_rate": 1e-3}}, training={"seed": args.seed})
    print(f"warm-up: {warm.state}, checkpoint {warm.final_checkpoint_id}")
    rl = client.fit(**rl_arguments(warm.final_checkpoint_id, args.seed, args.rl_steps), on_metrics=show)
    wins = [value for _, value in rl.series("eval/accuracy")]
    print(f"RL: {rl.state}; greedy win rate on 64 held-out games {wins[0]:.3f} before, {wins[-1]:.3f} after")


if __name__ == "__main__":
    main()
