"""Trivial games for bench/envhost.py, served by the EnvHost process by import path
(OPENTINKER_ENVHOST_GAMES="trivial=_envhost_games:TrivialGame,...", with bench/ on PYTHONPATH).

Every step returns the same short observation at once and the episode never ends, so what the
bench measures is the EnvHost's own cost per step (stream, session, game call, conversions),
not the game's. bench/_echo_server.py answers with the same OBSERVATION and REWARD, so both
servers send responses of the same size.
"""

from __future__ import annotations

from opentinker_env import AbstractGame, AsyncAbstractGame, StepResult

OBSERVATION = "observation: ok, go on"
"""What every step returns (also the echo baseline's observation)."""
REWARD = 1.0
SYSTEM_PROMPT = "Say anything."
INITIAL_USER_MESSAGE = "Go."
RESET_OBSERVATION = "start"


class TrivialGame(AbstractGame):
    """Answers every action with the same short observation; the episode never ends."""

    def get_system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def get_initial_user_message(self) -> str:
        return INITIAL_USER_MESSAGE

    def reset(self, **kwargs: object) -> str:
        return RESET_OBSERVATION

    def step(self, action: str) -> StepResult:
        return StepResult(observation=OBSERVATION, reward=REWARD, done=False)


class AsyncTrivialGame(AsyncAbstractGame):
    """TrivialGame with coroutine reset/step (the EnvHost runs them on its event loop)."""

    def get_system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def get_initial_user_message(self) -> str:
        return INITIAL_USER_MESSAGE

    async def reset(self, **kwargs: object) -> str:
        return RESET_OBSERVATION

    async def step(self, action: str) -> StepResult:
        return StepResult(observation=OBSERVATION, reward=REWARD, done=False)


GAMES = {"trivial": TrivialGame, "trivial-async": AsyncTrivialGame}
"""Name -> class, as the bench passes them to OPENTINKER_ENVHOST_GAMES."""


def games_setting() -> str:
    """The OPENTINKER_ENVHOST_GAMES value serving GAMES (module importable from bench/)."""
    return ",".join(f"{name}={__name__}:{cls.__name__}" for name, cls in GAMES.items())
