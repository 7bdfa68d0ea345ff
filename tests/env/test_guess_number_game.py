"""The built-in guess_number game: full episodes through the harness, hints, the dense reward
shaping, the turn limit, deterministic secrets with separate train/eval streams, config errors."""

from __future__ import annotations

import doctest
import math
import random

import pytest

from opentinker_env import GameConfigError, GameHarness, HarnessError, StepResult, play
from opentinker_runtime.games import guess_number_game
from opentinker_runtime.games.guess_number_game import GuessNumberGame, parse_guess


def binary_search(game: GuessNumberGame, **reset_kwargs: object) -> list[StepResult]:
    """Play one episode by bisecting the interval the hints leave open."""
    harness = GameHarness(game)
    harness.reset(**reset_kwargs)
    lo, hi = game.low, game.high
    results = []
    while True:
        guess = (lo + hi) // 2
        result = harness.step(f"{guess}")
        results.append(result)
        if result.done:
            return results
        if result.observation == "higher":
            lo = guess + 1
        else:
            assert result.observation == "lower"
            hi = guess - 1


def secrets(game: GuessNumberGame, split: str, count: int) -> list[int]:
    return [game.secret_for(split, index) for index in range(count)]


def test_short_prompts_and_metadata() -> None:
    game = GuessNumberGame()
    assert game.get_system_prompt() == "Guess the number. Reply with a number only."
    assert game.get_initial_user_message() == ""
    assert game.reset(index=0) == "Guess 1 to 16."
    assert GuessNumberGame(low=-3, high=40).reset() == "Guess -3 to 40."
    assert GuessNumberGame.multi_turn is True
    assert GuessNumberGame.describe().startswith("Multi-turn number guessing")
    config = GuessNumberGame.default_config()
    assert config["low"] == 1 and config["high"] == 16 and config["max_turns"] == 6
    GuessNumberGame(**config).reset(index=0)


def test_module_docstring_example_runs() -> None:
    failures, tried = doctest.testmod(guess_number_game, raise_on_error=False)
    assert tried > 0 and failures == 0


@pytest.mark.parametrize(("low", "high"), [(1, 16), (1, 100), (-5, 5), (0, 1), (10, 1000)])
@pytest.mark.parametrize("split", ["train", "eval"])
def test_binary_search_finds_the_secret_in_log_turns(low: int, high: int, split: str) -> None:
    size = high - low + 1
    bound = math.ceil(math.log2(size)) + 1
    game = GuessNumberGame(low=low, high=high, max_turns=bound, seed=5, eval_size=20)
    for index in range(20):
        results = binary_search(game, index=index, split=split)
        final = results[-1]
        assert final.done and final.observation == "correct"
        assert len(results) <= bound
        assert final.info["correct"] is True and final.info["turns"] == len(results)
        assert final.info["secret"] == game.secret_for(split, index)
        total = sum(result.reward for result in results)
        assert total >= 1.0
        assert total == pytest.approx(1.0 + game.progress_reward)  # the whole interval was narrowed
        assert all(result.reward > 0 for result in results)


def test_hints_are_right_for_every_guess() -> None:
    game = GuessNumberGame(low=1, high=16, seed=2)
    harness = GameHarness(game)
    for index in range(40):
        secret = game.secret_for("train", index)
        for guess in range(18):
            harness.reset(index=index)
            result = harness.step(str(guess))
            expected = "correct" if guess == secret else "higher" if secret > guess else "lower"
            assert result.observation == expected
            assert result.done is (guess == secret)


def test_hints_follow_the_secret_over_a_whole_episode() -> None:
    game = GuessNumberGame(low=1, high=16, max_turns=16, seed=0)
    secret = game.secret_for("train", 3)
    assert secret == 7
    episode = play(game, ["1", "16", "2", "15", "7"], index=3)
    assert [r.observation for r in episode.results] == ["higher", "lower", "higher", "lower", "correct"]
    assert [r.info["interval"] for r in episode.results[:-1]] == [[2, 16], [2, 15], [3, 15], [3, 14]]


def test_shaping_rewards_progress_and_prefers_halving() -> None:
    game = GuessNumberGame(low=1, high=16, seed=0, progress_reward=0.3, penalty=0.05)
    assert game.secret_for("train", 3) == 7
    halving = play(game, ["8"], index=3).results[0]  # rules out 8..16: 9 of the 15 to eliminate
    assert halving.observation == "lower" and not halving.done
    assert halving.reward == pytest.approx(0.3 * 9 / 15)
    assert halving.info == {"turn": 1, "guess": 8, "kind": "progress", "interval": [1, 7]}
    edge = play(game, ["1"], index=3).results[0]  # rules out 1 only
    assert edge.reward == pytest.approx(0.3 * 1 / 15)
    assert 0 < edge.reward < halving.reward
    lucky = play(game, ["7"], index=3).results[0]  # found at once: win + the whole progress bonus
    assert lucky.done and lucky.reward == pytest.approx(1.0 + 0.3)


def test_last_remaining_number_earns_only_the_win() -> None:
    game = GuessNumberGame(low=1, high=16, seed=0, progress_reward=0.3)
    episode = play(game, ["8", "4", "6", "7"], index=3)
    assert episode.results[-1].reward == pytest.approx(1.0)  # interval was already {7}
    assert episode.total_reward == pytest.approx(1.3)


@pytest.mark.parametrize(("actions", "kind"), [
    (["8", "12"], "outside"),         # 12 was ruled out by "lower" at 8
    (["8", "0"], "outside"),          # below low
    (["8", "99"], "outside"),         # above high
    (["8", "8"], "repeated"),
    (["8", "I don't know"], "unparseable"),
    (["8", ""], "unparseable"),
    (["8", "3.5"], "unparseable"),     # not an integer
    (["8", "answer: seven"], "unparseable"),
])
def test_shaping_penalises_wasted_turns(actions: list[str], kind: str) -> None:
    game = GuessNumberGame(low=1, high=16, seed=0, penalty=0.07)
    assert game.secret_for("train", 3) == 7
    episode = play(game, actions, index=3)
    wasted = episode.results[1]
    assert wasted.info["kind"] == kind and wasted.info["interval"] == [1, 7]
    assert wasted.reward == pytest.approx(-0.07)
    assert not wasted.done
    if kind == "unparseable":
        assert wasted.observation == "number?" and wasted.info["guess"] is None
    else:
        assert wasted.observation in ("higher", "lower")


def test_repeating_a_guess_outside_the_original_range_is_still_penalised() -> None:
    game = GuessNumberGame(low=1, high=16, seed=0)
    episode = play(game, ["0", "0", "x"], index=3)
    assert [r.info["kind"] for r in episode.results] == ["outside", "repeated", "unparseable"]
    assert all(r.reward == pytest.approx(-0.1) for r in episode.results)


def test_running_out_of_turns() -> None:
    game = GuessNumberGame(low=1, high=16, max_turns=3, seed=0)
    assert game.secret_for("train", 3) == 7
    episode = play(game, ["1", "2", "3", "7"], index=3)
    assert episode.done and len(episode.results) == 3 and episode.actions == ("1", "2", "3")
    final = episode.results[-1]
    assert final.info["correct"] is False and final.info["turns"] == 3 and final.info["secret"] == 7
    assert final.info["kind"] == "progress" and final.reward == pytest.approx(0.2 / 15)  # no win reward
    assert episode.total_reward == pytest.approx(0.2 * 3 / 15)
    idle = play(game, ["?", "?", "?"], index=3)
    assert idle.done and idle.results[-1].info["correct"] is False
    assert idle.total_reward == pytest.approx(-0.3)


def test_info_reveals_the_secret_only_at_the_end() -> None:
    game = GuessNumberGame(seed=0)
    episode = play(game, ["8", "4", "6", "7"], index=3)
    for result in episode.results[:-1]:
        assert set(result.info) == {"turn", "guess", "kind", "interval"}
    assert episode.results[-1].info == {"turn": 4, "guess": 7, "kind": "correct", "interval": [7, 7],
                                        "correct": True, "turns": 4, "secret": 7, "split": "train",
                                        "index": 3}


def test_step_after_the_end_or_before_reset_is_refused() -> None:
    game = GuessNumberGame(seed=0)
    with pytest.raises(RuntimeError, match="before reset"):
        game.step("8")
    harness = GameHarness(game)
    harness.reset(index=3)
    assert harness.step("7").done
    with pytest.raises(HarnessError):
        harness.step("7")
    with pytest.raises(RuntimeError):
        game.step("7")
    harness.reset(index=3)  # a new episode starts clean: 7 is not "repeated"
    assert harness.step("7").info["kind"] == "correct"


def test_random_play_totals_are_bounded_and_positive_only_with_progress() -> None:
    rng = random.Random(0)
    game = GuessNumberGame(low=1, high=16, max_turns=6, seed=1, progress_reward=0.2, penalty=0.1)
    for index in range(300):
        actions = [rng.choice([str(rng.randint(-2, 20)), "hmm", "\\boxed{5}"]) for _ in range(6)]
        episode = play(game, actions, index=index)
        assert episode.done
        kinds = [r.info["kind"] for r in episode.results]
        total = episode.total_reward
        assert -0.1 * 6 - 1e-9 <= total <= 1.2 + 1e-9
        if total > 0:
            assert "progress" in kinds or "correct" in kinds
        found = episode.results[-1].info["correct"]
        assert found == (kinds[-1] == "correct")
        assert (total >= 1.0 - 0.1 * 5 - 1e-9) if found else (total < 0.2 + 1e-9)


@pytest.mark.parametrize(("text", "expected"), [
    ("7", 7), (" 12\n", 12), ("I guess 3", 3), ("between 1 and 16: 9", 9), ("-4", -4),
    ("\\boxed{5} or 6", 5), ("answer: 11", 11), ("1,024", 1024), ("7.0", 7),
    ("3.5", None), ("seven", None), ("", None),
])
def test_parse_guess(text: str, expected: int | None) -> None:
    assert parse_guess(text) == expected


def test_secrets_are_deterministic_by_seed_split_and_index() -> None:
    config = {"low": 1, "high": 100, "seed": 7}
    first = GuessNumberGame(**config)
    train = secrets(first, "train", 50)
    assert train == secrets(GuessNumberGame(**config), "train", 50)
    assert secrets(first, "eval", 32) == secrets(GuessNumberGame(**config), "eval", 32)
    assert train != secrets(GuessNumberGame(low=1, high=100, seed=8), "train", 50)
    assert len(set(train)) > 20  # the stream is not stuck on a few numbers
    # the index alone picks the secret, whatever was played before
    other = GuessNumberGame(**config)
    for index in reversed(range(50)):
        final = binary_search(other, index=index)[-1]
        assert final.info["secret"] == train[index] and final.info["index"] == index


def test_train_and_eval_secrets_come_from_different_streams() -> None:
    for seed in range(5):
        game = GuessNumberGame(low=1, high=1000, seed=seed, eval_size=32)
        train, held_out = secrets(game, "train", 32), secrets(game, "eval", 32)
        assert train != held_out
        assert sum(a == b for a, b in zip(train, held_out, strict=True)) < 4
        assert held_out != secrets(GuessNumberGame(low=1, high=1000, seed=seed + 1), "eval", 32)
        # the eval stream does not depend on how many eval secrets there are
        assert secrets(GuessNumberGame(low=1, high=1000, seed=seed, eval_size=8), "eval", 8) == held_out[:8]


def test_eval_episode_reports_its_split_and_secret() -> None:
    game = GuessNumberGame(low=1, high=1000, max_turns=11, seed=3)
    final = binary_search(game, index=5, split="eval")[-1]
    assert final.info["split"] == "eval" and final.info["index"] == 5
    assert final.info["secret"] == game.secret_for("eval", 5)


def test_reset_without_index_walks_the_split_and_seed_picks_the_episode() -> None:
    game = GuessNumberGame(low=1, high=1000, max_turns=11, seed=4, eval_size=8)
    walked = [binary_search(game)[-1].info["secret"] for _ in range(3)]
    assert walked == secrets(game, "train", 3)
    assert binary_search(game, seed=1)[-1].info["secret"] == walked[1]
    assert binary_search(game, split="eval", seed=8 + 2)[-1].info["index"] == 2


@pytest.mark.parametrize(("config", "field"), [
    ({"low": "1"}, "low"),
    ({"low": 1.5}, "low"),
    ({"high": 1}, "high"),
    ({"low": 5, "high": 3}, "high"),
    ({"max_turns": 0}, "max_turns"),
    ({"max_turns": True}, "max_turns"),
    ({"seed": "x"}, "seed"),
    ({"eval_size": 0}, "eval_size"),
    ({"progress_reward": -0.1}, "progress_reward"),
    ({"progress_reward": float("nan")}, "progress_reward"),
    ({"penalty": "0.1"}, "penalty"),
    ({"penalty": float("inf")}, "penalty"),
    ({"system_prompt": ""}, "system_prompt"),
])
def test_bad_config_names_the_field(config: dict[str, object], field: str) -> None:
    with pytest.raises(GameConfigError, match=f"^{field}"):
        GuessNumberGame(**config)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"split": "test"}, "split"), ({"index": -1}, "index"), ({"index": 32, "split": "eval"}, "index"),
    ({"index": "3"}, "index"), ({"seed": -1}, "seed"),
])
def test_bad_reset_kwargs_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(GameConfigError, match=f"^{field}"):
        GuessNumberGame().reset(**kwargs)


def test_integral_floats_from_json_are_accepted() -> None:
    from_json = GuessNumberGame(low=1.0, high=50.0, max_turns=7.0, seed=3.0, eval_size=10.0)
    plain = GuessNumberGame(low=1, high=50, max_turns=7, seed=3, eval_size=10)
    assert binary_search(from_json, index=2.0)[-1].info == binary_search(plain, index=2)[-1].info
    assert secrets(from_json, "eval", 10) == secrets(plain, "eval", 10)
