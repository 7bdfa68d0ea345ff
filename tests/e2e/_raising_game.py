"""A game with a bug: its step() raises, in every episode (tests/chaos/test_env_misbehaviour.py)."""

from __future__ import annotations

from typing import Any

from opentinker_env import AbstractGame, StepResult

SCORES: dict[str, float] = {}


class RaisingGame(AbstractGame):
    """Asks for a word and looks the reply up in an empty score table: KeyError on every step."""

    def get_system_prompt(self) -> str:
        return "Reply with one word."

    def get_initial_user_message(self) -> str:
        return ""

    def reset(self, **kwargs: Any) -> str:
        return "Your word?"

    def step(self, action: str) -> StepResult:
        return StepResult(observation="scored", reward=self._score(), done=True)

    def _score(self) -> float:
        return SCORES["unscored reply"]
