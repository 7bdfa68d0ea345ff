"""The game SDK without services: StepResult validation, the harness (sync and async games),
the prompt rule, and loading games by import path."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from typing import Any

import pytest

from opentinker_env import AbstractGame, AsyncAbstractGame, GameHarness, HarnessError, StepResult, aplay, opening_messages, play
from opentinker_runtime.games import GameLoadError, MathGame, builtin_games, load_game_class
from opentinker_env.game import is_game_class
from opentinker_runtime.games.registry import check_game_name


class Countdown(AbstractGame):
    """Say the numbers from `start` down to 1; one turn per number."""

    def __init__(self, start: int = 3) -> None:
        self.start = start

    def get_system_prompt(self) -> str:
        return "Count down."

    def get_initial_user_message(self) -> str:
        return "Ready?"

    def reset(self, *, start: int | None = None) -> str:
        self.next = start or self.start
        return str(self.next)

    def step(self, action: str) -> StepResult:
        correct = action.strip() == str(self.next)
        self.next -= 1
        done = not correct or self.next == 0
        return StepResult(observation="" if done else "next", reward=float(correct), done=done)


class AsyncEcho(AsyncAbstractGame):
    """Repeat the word."""

    def get_system_prompt(self) -> str:
        return ""

    def get_initial_user_message(self) -> str:
        return ""

    async def reset(self, *, word: str = "hi") -> str:
        await asyncio.sleep(0)
        self.word = word
        return word

    async def step(self, action: str) -> StepResult:
        return StepResult(reward=1.0 if action == self.word else 0.0, done=True, info={"word": self.word})


class ReturnsNumber(Countdown):
    def reset(self, **kwargs: Any) -> str:
        return 42  # type: ignore[return-value]


class ReturnsTuple(Countdown):
    def step(self, action: str) -> StepResult:
        return ("obs", 1.0, True)  # type: ignore[return-value]


def test_step_result_converts_int_reward_and_defaults() -> None:
    result = StepResult(reward=1)
    assert result == StepResult(observation="", reward=1.0, done=False, info={})
    assert isinstance(result.reward, float)


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"observation": 3}, "observation must be str"),
    ({"reward": "1"}, "reward must be a number"),
    ({"reward": True}, "reward must be a number"),
    ({"reward": math.nan}, "reward must be finite"),
    ({"done": 1}, "done must be bool"),
    ({"info": {1: "x"}}, "info must be a dict with str keys"),
    ({"info": {"x": object()}}, "info must be JSON-compatible"),
    ({"info": {"x": math.inf}}, "info must be JSON-compatible"),
])
def test_step_result_rejects_invalid_fields(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises((TypeError, ValueError), match=error):
        StepResult(**kwargs)


def test_step_result_is_frozen() -> None:
    with pytest.raises(AttributeError):
        StepResult().reward = 2.0  # type: ignore[misc]


def test_play_runs_a_multi_turn_episode_and_builds_the_transcript() -> None:
    episode = play(Countdown(), ["3", "2", "1", "0"], start=3)
    assert episode.done and episode.actions == ("3", "2", "1")  # stops at done
    assert episode.total_reward == 3.0
    assert episode.messages() == [
        {"role": "system", "content": "Count down."},
        {"role": "user", "content": "Ready?\n\n3"},
        {"role": "assistant", "content": "3"}, {"role": "user", "content": "next"},
        {"role": "assistant", "content": "2"}, {"role": "user", "content": "next"},
        {"role": "assistant", "content": "1"},
    ]


def test_play_stops_when_actions_run_out() -> None:
    episode = play(Countdown(), ["3"])
    assert not episode.done and episode.total_reward == 1.0 and len(episode.results) == 1


def test_opening_messages_drop_empty_parts() -> None:
    assert opening_messages("S", "", "3+4=") == [{"role": "system", "content": "S"},
                                                 {"role": "user", "content": "3+4="}]
    assert opening_messages("S", "intro", "")[1] == {"role": "user", "content": "intro"}


def test_harness_refuses_steps_out_of_order() -> None:
    harness = GameHarness(Countdown())
    with pytest.raises(HarnessError, match="before reset"):
        harness.step("3")
    harness.reset(start=1)
    assert harness.step("1").done
    with pytest.raises(HarnessError, match="episode is done"):
        harness.step("0")
    assert harness.reset(start=2) == "2"  # a new episode starts clean
    assert harness.episode is not None and harness.episode.actions == ()


def test_harness_checks_what_the_game_returns() -> None:
    with pytest.raises(TypeError, match=r"reset\(\) must return str, got int"):
        play(ReturnsNumber(), [])
    with pytest.raises(TypeError, match=r"step\(\) must return StepResult, got tuple"):
        play(ReturnsTuple(), ["3"])
    with pytest.raises(ValueError, match="limit is 2"):
        GameHarness(Countdown(), max_observation_chars=2).reset(start=100)


def test_async_games_play_through_play_and_aplay() -> None:
    assert play(AsyncEcho(), ["hey"], word="hey").total_reward == 1.0
    episode = asyncio.run(aplay(AsyncEcho(), ["no"], word="yes"))
    assert episode.done and episode.total_reward == 0.0 and episode.results[0].info == {"word": "yes"}
    with pytest.raises(HarnessError, match="is async"):
        GameHarness(AsyncEcho()).reset()


def test_builtin_registry_and_import_paths() -> None:
    games = builtin_games()
    assert games["math"] is MathGame
    assert set(games) == {"math", "math_tool", "guess_number", "nim", "gomoku"}
    assert all(is_game_class(cls) and check_game_name(name) is None for name, cls in games.items())
    assert load_game_class("opentinker_runtime.games:MathGame") is MathGame
    assert load_game_class("tests.env.test_game_api:Countdown") is Countdown


@pytest.mark.parametrize(("path", "error"), [
    ("no_colon", "not an import path"),
    ("no_such_module_xyz:Game", "cannot import module 'no_such_module_xyz'"),
    ("opentinker_env:Missing", "has no attribute 'Missing'"),
    ("opentinker_env:StepResult", "not a concrete subclass"),
    ("opentinker_env:AbstractGame", "not a concrete subclass"),
])
def test_load_game_class_errors_say_what_is_wrong(path: str, error: str) -> None:
    with pytest.raises(GameLoadError, match=error):
        load_game_class(path)


def test_the_env_sdk_imports_neither_torch_nor_grpc() -> None:
    code = "import sys, opentinker_env; print('torch' in sys.modules, 'grpc' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert output.stdout.split() == ["False", "False"]


class _Picky(AbstractGame):
    """Scores "yes"; a cut-off reply costs a point and ends the episode."""

    def get_system_prompt(self) -> str:
        return "Say yes."

    def get_initial_user_message(self) -> str:
        return ""

    def reset(self) -> str:
        return "?"

    def step(self, action: str) -> StepResult:
        return StepResult(observation="again", reward=float(action == "yes"))

    def on_truncated(self, action: str, **kwargs: object) -> StepResult:
        return StepResult(reward=-1.0, done=True, info={"cut": len(action)})


def test_a_cut_off_reply_goes_to_on_truncated_in_the_harness():
    from opentinker_env import Cut
    episode = play(_Picky(), ["yes", Cut("y" * 30), "yes"])
    assert episode.actions == ("yes", "y" * 30) and episode.done
    assert [r.reward for r in episode.results] == [1.0, -1.0] and episode.results[-1].info == {"cut": 30}


def test_the_default_on_truncated_judges_the_cut_reply_with_step():
    class Plain(_Picky):
        on_truncated = AbstractGame.on_truncated

    harness = GameHarness(Plain())
    harness.reset()
    assert harness.step("yes", truncated=True).reward == 1.0  # judged like any reply
    assert harness.step("ramble", truncated=True).reward == 0.0
