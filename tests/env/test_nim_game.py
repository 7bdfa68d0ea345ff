"""The built-in nim game: a two-player game against a scripted random opponent."""

from __future__ import annotations

import doctest
import random
import statistics

import pytest

from opentinker_env import Cut, GameConfigError, play
from opentinker_runtime.games import nim_game
from opentinker_runtime.games.nim_game import NimGame, best_take


def optimal_game(game: NimGame, split: str, index: int) -> bool:
    game.reset(index=index, split=split)
    while True:
        result = game.step(str(best_take(game.stones)))
        if result.done:
            return result.info["win"]


def random_game(game: NimGame, split: str, index: int, rng: random.Random) -> bool:
    game.reset(index=index, split=split)
    while True:
        result = game.step(str(rng.randint(1, min(3, game.stones))))
        if result.done:
            return result.info["win"]


def test_the_docstring_examples_hold():
    failures, tried = doctest.testmod(nim_game, raise_on_error=False)
    assert tried > 0 and failures == 0


def test_the_multiple_of_four_rule_beats_the_random_opponent_and_random_play_does_not():
    game = NimGame(seed=3)
    assert statistics.mean(optimal_game(game, "eval", i) for i in range(64)) >= 0.95
    rng = random.Random(0)
    assert 0.35 <= statistics.mean(random_game(game, "train", i, rng) for i in range(400)) <= 0.65


def test_games_are_deterministic_for_split_index_and_seed():
    def transcript(seed: int, split: str, index: int) -> list[str]:
        return [r.observation for r in play(NimGame(seed=seed), ["1"] * 10, index=index, split=split).results]
    assert transcript(1, "train", 5) == transcript(1, "train", 5)
    others = {tuple(transcript(seed, split, index)) for seed, split, index in
              [(1, "train", 5), (2, "train", 5), (1, "eval", 5), (1, "train", 6), (1, "train", 7)]}
    assert len(others) >= 3


@pytest.mark.parametrize("reply", ["4", "0", "-1", "two", "", "1.5"])
def test_an_illegal_move_loses_at_once(reply: str):
    episode = play(NimGame(seed=0), [reply], index=0)
    result = episode.results[-1]
    assert result.done and result.reward == -1.0
    assert result.info["illegal"] is True and result.info["outcome"] == "loss" and result.info["correct"] is False


def test_taking_more_than_is_left_is_illegal():
    game = NimGame(seed=0, min_stones=2, max_stones=2)
    game.reset(index=0)
    assert game.step("3").info["illegal"]


def test_a_cut_off_reply_is_judged_like_any_other_and_loses():
    episode = play(NimGame(seed=0), [Cut("I think the best move here is to take")], index=0)
    assert episode.results[-1].reward == -1.0 and episode.results[-1].info["illegal"]


def test_every_step_reports_numeric_info_for_env_metrics():
    episode = play(NimGame(seed=0), ["1", "1", "1", "1", "1", "1", "1", "1"], index=0)
    for result in episode.results:
        assert isinstance(result.info["illegal"], bool) and isinstance(result.info["stones_left"], int)
    assert isinstance(episode.results[-1].info["win"], bool)


def test_bad_config_names_the_field():
    with pytest.raises(GameConfigError, match="max_stones"):
        NimGame(min_stones=9, max_stones=3)
    with pytest.raises(GameConfigError, match="index"):
        NimGame(eval_size=4).reset(index=4, split="eval")
