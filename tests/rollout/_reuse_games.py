"""A game for the session-reuse tests, served by a real EnvHost by import path
(`seeded=tests.rollout._reuse_games:SeededGame`).

What an episode sees depends only on its reset kwargs and seed (reset restarts the game
completely), so an episode plays the same on a fresh session and on a reused one. Reset kwargs
make it misbehave on its first step: `explode` raises, `sleep_s` hangs for that long.
"""

from __future__ import annotations

import random
import time

from opentinker_env import AbstractGame, StepResult


class SeededGame(AbstractGame):
    """`turns` steps; each observation and reward is drawn from Random(index, seed, tag)."""

    def __init__(self, turns: float = 3) -> None:
        self.turns = int(turns)
        self.rng = random.Random(0)
        self.played = 0
        self.explode = False
        self.sleep_s = 0.0

    def get_system_prompt(self) -> str:
        return "Guess."

    def get_initial_user_message(self) -> str:
        return "Go."

    def reset(self, index: float = 0, tag: str = "", explode: bool = False, sleep_s: float = 0.0,
              seed: int | None = None) -> str:
        self.rng = random.Random(f"{index}:{seed}:{tag}")
        self.played, self.explode, self.sleep_s = 0, explode, float(sleep_s)
        return f"{tag} game {index:.0f} starts at {self.rng.randint(0, 999)}"

    def step(self, action: str) -> StepResult:
        if self.explode:
            raise ValueError("the game exploded")
        if self.sleep_s:
            time.sleep(self.sleep_s)
        self.played += 1
        done = self.played >= self.turns
        return StepResult(observation=f"after {action!r}: {self.rng.randint(0, 999)}",
                          reward=round(self.rng.random(), 6), done=done)
