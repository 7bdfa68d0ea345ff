"""Environments for OpenTinker: write a game, test it locally, serve it through the EnvHost.

    from opentinker.env import AbstractGame, StepResult, play

    class Echo(AbstractGame):
        def get_system_prompt(self): return "Repeat the word."
        def get_initial_user_message(self): return ""
        def reset(self, word="hi"): self.word = word; return word
        def step(self, action): return StepResult(reward=float(action == self.word), done=True)

    assert play(Echo(), ["hi"]).total_reward == 1.0

Nothing here imports torch or grpc.
"""

from opentinker.env.answers import answers_match, extract_answer, normalize_answer
from opentinker.env.data import (
    DatasetError,
    JsonlDataset,
    SeededGenerator,
    read_jsonl,
    read_records,
    write_jsonl,
)
from opentinker.env.game import (
    DEFAULT_MAX_OBSERVATION_CHARS,
    AbstractGame,
    AsyncAbstractGame,
    Game,
    GameClass,
    GameConfigError,
    NotYourTurn,
    StepResult,
    check_observation,
    check_step_result,
    is_game_class,
    opening_messages,
    opening_user_content,
)
from opentinker.env.harness import Cut, Episode, GameHarness, HarnessError, aplay, play
from opentinker.env.math_game import MathGame, math_sft_examples
from opentinker.env.math_problems import MathProblem
from opentinker.env.registry import GameLoadError, builtin_games, check_game_name, load_game_class

__all__ = [
    "DEFAULT_MAX_OBSERVATION_CHARS", "AbstractGame", "AsyncAbstractGame", "Cut", "DatasetError", "Episode",
    "Game", "GameClass", "GameConfigError", "GameHarness", "NotYourTurn", "GameLoadError", "HarnessError",
    "JsonlDataset", "MathGame", "MathProblem", "SeededGenerator", "StepResult", "answers_match",
    "aplay", "builtin_games", "check_game_name", "check_observation", "check_step_result",
    "extract_answer", "is_game_class", "load_game_class", "math_sft_examples", "normalize_answer",
    "opening_messages", "opening_user_content", "play", "read_jsonl", "read_records", "write_jsonl",
]
