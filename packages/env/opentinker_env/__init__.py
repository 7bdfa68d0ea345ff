"""The environment interface of OpenTinker: write a game, test it locally, serve it through the EnvHost.

    from opentinker_env import AbstractGame, StepResult, play

    class Echo(AbstractGame):
        def get_system_prompt(self): return "Repeat the word."
        def get_initial_user_message(self): return ""
        def reset(self, word="hi"): self.word = word; return word
        def step(self, action): return StepResult(reward=float(action == self.word), done=True)

    assert play(Echo(), ["hi"]).total_reward == 1.0

Nothing here imports torch, grpc or any other OpenTinker package: the SDK (what a laptop
installs) and the runtime (the built-in games in `opentinker_runtime.games`, the EnvHost) both
stand on it.
"""

from opentinker_env.answers import answers_match, extract_answer, normalize_answer
from opentinker_env.data import (
    DatasetError,
    JsonlDataset,
    SeededGenerator,
    read_jsonl,
    read_records,
    write_jsonl,
)
from opentinker_env.game import (
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
from opentinker_env.harness import Cut, Episode, GameHarness, HarnessError, aplay, play

__all__ = [
    "DEFAULT_MAX_OBSERVATION_CHARS", "AbstractGame", "AsyncAbstractGame", "Cut", "DatasetError", "Episode",
    "Game", "GameClass", "GameConfigError", "GameHarness", "NotYourTurn", "HarnessError",
    "JsonlDataset", "SeededGenerator", "StepResult", "answers_match",
    "aplay", "check_observation", "check_step_result",
    "extract_answer", "is_game_class", "normalize_answer",
    "opening_messages", "opening_user_content", "play", "read_jsonl", "read_records", "write_jsonl",
]
