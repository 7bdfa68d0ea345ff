"""The games of bench/multiturn_rl.py: each one's environment, warm-up transcripts and target.

Warm-up players are deliberately mediocre (a Nim player with a losing rule of thumb, a guesser
that ignores some hints), so the SFT policy plays the game's format well and its strategy
badly: what RL must then improve is the strategy, measured greedily on held-out episodes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from opentinker_runtime.games.guess_number_game import DEFAULT_SYSTEM_PROMPT as GUESS_SYSTEM
from opentinker_runtime.games.nim_game import DEFAULT_SYSTEM_PROMPT as NIM_SYSTEM
from opentinker_runtime.games.nim_game import NimGame

Chat = dict[str, list[dict[str, str]]]


@dataclass(frozen=True, kw_only=True)
class BenchGame:
    name: str
    config: dict
    max_turns: int
    tuned: dict
    """Recipe fields this game sets (multiturn_rl.Recipe; a command-line flag still wins): the RL
    steps that fit the bench's 10 minutes on a 2-core machine, and what its episodes need."""
    target_gain: float
    """Greedy held-out success (eval/accuracy) after RL minus after the SFT warm-up."""
    what: str
    """What eval/accuracy means for this game, for the report."""
    warmup: Callable[[int, int], list[Chat]]
    """(seed, count) -> SFT transcripts."""


def nim(eval_size: int = 64) -> BenchGame:
    config = {"min_stones": 7, "max_stones": 15, "max_take": 3, "eval_size": eval_size}
    # nim's episodes are longer (up to 8 turns): the update overlaps the next rollout (async, k=1)
    # so 200 steps fit; lr 5e-4 (3e-4 gained only 0.06 on seed 3 in 120 steps; 1e-3 collapses)
    tuned = {"rl_steps": 200, "lr": 5e-4, "max_staleness": 1}
    return BenchGame(name="nim", config=config, max_turns=8, tuned=tuned, target_gain=0.2, what="greedy win rate",
                     warmup=lambda seed, count: nim_transcripts(config, seed, count))


def guess_number(eval_size: int = 64, *, high: int = 7, max_turns: int = 3, follow: float = 0.6) -> BenchGame:
    # penalty 0: wasted guesses already earn no shaping
    config = {"low": 1, "high": high, "max_turns": max_turns, "penalty": 0.0, "eval_size": eval_size}
    return BenchGame(name="guess_number", config=config, max_turns=max_turns, tuned={"rl_steps": 300},
                     target_gain=0.15,
                     what="greedy success rate",
                     warmup=lambda seed, count: guess_transcripts(config, seed, count, follow))


def wrong_rule(stones: int, max_take: int) -> int:
    """A plausible rule of thumb that loses: leave the opponent two more than a multiple of
    max_take + 1 (the winning rule shifted by two), else take 1."""
    return min((stones + 2) % (max_take + 1) or 1, stones)


def nim_transcripts(config: dict, seed: int, count: int, rule_share: float = 0.5) -> list[Chat]:
    """Games of a player who follows `wrong_rule` with probability `rule_share` and otherwise
    takes a uniformly random legal number, against the game's own opponent (played through the
    real game, so the text is exactly what RL will see). A random player's moves do not depend
    on the pile, so a model warmed up on them never learns to read it; this player's do, so the
    warm-up policy reads the pile and plays a losing rule (greedy: about half its games won)."""
    rng = random.Random(f"warmup/{seed}")
    game = NimGame(**config, seed=10_000 + seed)  # other piles and opponent moves than RL's
    max_take = config["max_take"]
    chats = []
    for index in range(count):
        messages = [{"role": "system", "content": NIM_SYSTEM}, {"role": "user", "content": game.reset(index=index)}]
        while True:
            legal = min(max_take, game.stones)
            ruled = rng.random() < rule_share
            take = str(wrong_rule(game.stones, max_take) if ruled else rng.randint(1, legal))
            result = game.step(take)
            messages.append({"role": "assistant", "content": take})
            if result.done:
                break
            messages.append({"role": "user", "content": result.observation})
        chats.append({"messages": messages})
    return chats


def guess_transcripts(config: dict, seed: int, count: int, follow: float) -> list[Chat]:
    """Chats of a player who, after a hint, guesses inside the interval the hints still allow
    with probability `follow` (uniformly there), otherwise anywhere in low..high."""
    rng = random.Random(seed)
    low_bound, high_bound, turns = config["low"], config["high"], config["max_turns"]
    chats = []
    for _ in range(count):
        secret = rng.randint(low_bound, high_bound)
        low, high = low_bound, high_bound
        messages = [{"role": "system", "content": GUESS_SYSTEM},
                    {"role": "user", "content": f"Guess {low_bound} to {high_bound}."}]
        for turn in range(turns):
            hinted = turn > 0 and rng.random() < follow
            guess = rng.randint(low, high) if hinted else rng.randint(low_bound, high_bound)
            if guess < secret:
                low = max(low, guess + 1)
            elif guess > secret:
                high = min(high, guess - 1)
            messages.append({"role": "assistant", "content": str(guess)})
            if guess == secret or turn == turns - 1:
                break
            messages.append({"role": "user", "content": "higher" if guess < secret else "lower"})
        chats.append({"messages": messages})
    return chats


GAMES = {"nim": nim, "guess_number": guess_number}
