"""The game bench/rollout.py plays, served by the EnvHost process by import path and also
played in-process by the baselines (OPENTINKER_ENVHOST_GAMES="turns=_rollout_games:TurnsGame").

Every episode lasts `turns` steps whatever the model says (done on the last one, reward 1
there, 0 before), and every step waits `delay_ms` milliseconds (asyncio.sleep, as a game
that calls a remote tool would) before answering with a short observation. So the work per
episode is fixed by the game and the sampled action lengths, the same in every loop.
"""

from __future__ import annotations

import asyncio

from opentinker_env import AsyncAbstractGame, StepResult

SYSTEM_PROMPT = "Reply briefly."
INITIAL_USER_MESSAGE = "Begin."


class TurnsGame(AsyncAbstractGame):
    """A fixed number of turns, each step delayed by `delay_ms`."""

    def __init__(self, *, turns: float = 3, delay_ms: float = 0.0) -> None:
        self.turns = int(turns)
        self.delay_s = float(delay_ms) / 1000.0
        self.played = 0

    def get_system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def get_initial_user_message(self) -> str:
        return INITIAL_USER_MESSAGE

    async def reset(self, **kwargs: object) -> str:
        self.played = 0
        return f"Round {kwargs.get('index', 0)}."

    async def step(self, action: str) -> StepResult:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.played += 1
        done = self.played >= self.turns
        return StepResult(observation=f"ok {self.played}", reward=1.0 if done else 0.0, done=done)
