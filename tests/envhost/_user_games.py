"""A folder of user games outside the repository, for EnvHost processes that import games by
module path (test_process.py, test_cli.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

USER_GAME = '''
from opentinker_env import AbstractGame, StepResult


class GuessGame(AbstractGame):
    """Guess the secret number; the game says higher or lower."""

    def __init__(self, secret: int = 5):
        self.secret = secret

    def get_system_prompt(self):
        return "Guess a number from 1 to 9."

    def get_initial_user_message(self):
        return "Your guess?"

    def reset(self, **kwargs):
        self.secret = kwargs.get("secret", self.secret)
        return ""

    def step(self, action):
        guess = int(action)
        if guess == self.secret:
            return StepResult(observation="right", reward=1.0, done=True)
        return StepResult(observation="higher" if guess < self.secret else "lower", reward=-0.1)
'''


@pytest.fixture
def user_games(tmp_path: Path) -> Path:
    """A folder holding the module `ot_user_games_test` (not importable from the repository)."""
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "ot_user_games_test.py").write_text(textwrap.dedent(USER_GAME))
    return folder
