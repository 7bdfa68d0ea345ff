"""The built-in math_tool game: full multi-turn episodes through the harness (calculator
calls, answers, tool errors, format reminders, caps), determinism and config errors."""

from __future__ import annotations

import pytest

from opentinker_env import GameConfigError, GameHarness, HarnessError, play
from opentinker_env.game import is_game_class
from opentinker_runtime.games.math_tool_game import FORMAT_REMINDER, MathToolGame


def problem(game: MathToolGame, index: int = 0, split: str = "train") -> tuple[str, str]:
    """(question, expected answer) of a problem, without playing it."""
    question = game.reset(index=index, split=split)
    assert game.problem is not None
    return question, game.problem.answer


def test_short_prompts_and_class_facts() -> None:
    game = MathToolGame()
    assert is_game_class(MathToolGame) and MathToolGame.multi_turn is True
    assert game.get_system_prompt() == "Calculator: <calc>1+2</calc>. Reply <answer>N</answer>."
    assert game.get_initial_user_message() == ""
    question = game.reset(index=0)
    a, b = question.rstrip("=").split("*")
    assert question.endswith("=") and 2 <= len(a) <= 3 and 2 <= len(b) <= 3
    assert MathToolGame(**MathToolGame.default_config()).reset(index=3) == game.reset(index=3)
    assert MathToolGame.describe().startswith("Multi-turn arithmetic with a calculator tool")


def test_call_the_tool_then_answer() -> None:
    game = MathToolGame(seed=5)
    question, answer = problem(game, 2)
    expression = question.rstrip("=")
    episode = play(game, [f"Let me compute. <calc>{expression}</calc>", f"<answer>{answer}</answer>"],
                   index=2)
    assert episode.done and episode.total_reward == 1.0
    tool, final = episode.results
    assert (tool.observation, tool.reward, tool.done) == (f"= {answer}", 0.0, False)
    assert tool.info == {"tool_calls": 1, "turns": 1}
    assert final.info == {"correct": True, "expected": answer, "extracted": answer, "split": "train",
                          "index": 2, "tool_calls": 1, "turns": 2, "reason": "answer"}
    assert episode.messages() == [
        {"role": "system", "content": game.get_system_prompt()},
        {"role": "user", "content": question},
        {"role": "assistant", "content": f"Let me compute. <calc>{expression}</calc>"},
        {"role": "user", "content": f"= {answer}"},
        {"role": "assistant", "content": f"<answer>{answer}</answer>"},
    ]


def test_answer_without_the_tool_and_normalised_answers() -> None:
    game = MathToolGame(seed=1)
    _, answer = problem(game, 0)
    assert play(game, [f"<answer>{answer}</answer>"], index=0).total_reward == 1.0
    with_commas = f"{int(answer):,}"
    episode = play(game, [f"<answer> {with_commas} </answer>"], index=0)
    assert episode.total_reward == 1.0 and episode.results[0].info["extracted"] == with_commas


def test_wrong_answer_scores_zero() -> None:
    game = MathToolGame(seed=2)
    _, answer = problem(game, 4)
    episode = play(game, ["<calc>1+1</calc>", f"<answer>{int(answer) + 1}</answer>"], index=4)
    assert episode.done and episode.total_reward == 0.0
    info = episode.results[-1].info
    assert info["correct"] is False and info["expected"] == answer
    assert info["extracted"] == str(int(answer) + 1) and info["reason"] == "answer"
    assert play(game, ["<answer>many</answer>"], index=4).results[0].info["correct"] is False
    assert play(game, ["<answer></answer>"], index=4).total_reward == 0.0


def test_answer_wins_over_a_tool_call_in_the_same_turn_and_the_last_answer_counts() -> None:
    game = MathToolGame()
    question, answer = problem(game, 1)
    episode = play(game, [f"<calc>{question[:-1]}</calc><answer>1</answer><answer>{answer}</answer>"],
                   index=1)
    assert len(episode.results) == 1 and episode.total_reward == 1.0
    assert episode.results[0].info["tool_calls"] == 0


def test_tool_errors_are_observations() -> None:
    game = MathToolGame()
    harness = GameHarness(game)
    harness.reset(index=0)
    result = harness.step("<calc>1/0</calc>")
    assert (result.observation, result.reward, result.done) == ("error: division by zero", 0.0, False)
    assert harness.step("<calc>2+x</calc>").observation == "error: unexpected 'x' at position 3"
    assert harness.step("<calc>__import__('os').system('echo hi')</calc>").observation == \
        "error: unexpected '_' at position 1"
    assert harness.step("<calc>9**9**9</calc>").observation.startswith("error: result too large")
    assert harness.episode is not None and not harness.episode.done


def test_several_calls_in_one_turn_and_an_unclosed_final_tag() -> None:
    game = MathToolGame(max_tool_calls=3)
    harness = GameHarness(game)
    harness.reset(index=0)
    result = harness.step("<calc>2*3</calc> and <calc> 10 / 4 </calc>")
    assert result.observation == "= 6\n= 2.5" and result.info["tool_calls"] == 2
    result = harness.step("then <calc>12*34")  # generation stopped at the '</calc>' stop string
    assert result.observation == "= 408" and result.info["tool_calls"] == 3


def test_format_reminder_costs_the_penalty() -> None:
    game = MathToolGame(format_penalty=0.25)
    _, answer = problem(game, 0)
    episode = play(game, ["I think it is big.", f"<answer>{answer}</answer>"], index=0)
    reminder, final = episode.results
    assert (reminder.observation, reminder.reward, reminder.done) == (FORMAT_REMINDER, -0.25, False)
    assert FORMAT_REMINDER == "Use <calc>EXPR</calc> or <answer>N</answer>."
    assert final.reward == 1.0 and episode.total_reward == 0.75
    # without bare_answer a bare number is a format miss, not an answer
    assert play(game, [answer], index=0).results[0].observation == FORMAT_REMINDER
    assert play(MathToolGame(format_penalty=0), ["?"], index=0).results[0].reward == 0.0


def test_bare_answer_ends_the_episode_when_configured() -> None:
    game = MathToolGame(bare_answer=True)
    _, answer = problem(game, 0)
    right = play(game, [f"It is {answer}"], index=0)
    assert right.done and right.total_reward == 1.0 and right.results[0].info["extracted"] == answer
    assert play(game, ["7"], index=0).total_reward == 0.0
    # a turn without any number still gets the reminder; tool calls still work
    assert play(game, ["hmm"], index=0).results[0].observation == FORMAT_REMINDER
    assert play(game, ["<calc>2*21</calc>"], index=0).results[0].observation == "= 42"


def test_tool_call_cap_ends_the_episode_with_zero_reward() -> None:
    game = MathToolGame(max_tool_calls=2)
    _, answer = problem(game, 0)
    calls = ["<calc>1+1</calc>", "<calc>2+2</calc>", f"<calc>{answer}</calc>",
             f"<answer>{answer}</answer>"]
    episode = play(game, calls, index=0)
    assert len(episode.results) == 3 and episode.done and episode.total_reward == 0.0
    final = episode.results[-1]
    assert final.observation == "" and final.info["reason"] == "tool_call_limit"
    assert final.info["correct"] is False and final.info["tool_calls"] == 3
    # several calls in one turn count one by one
    over = play(MathToolGame(max_tool_calls=2), ["<calc>1</calc><calc>2</calc><calc>3</calc>"], index=0)
    assert over.done and over.results[0].info["reason"] == "tool_call_limit"
    # the default cap is 4: four calls then the answer still wins
    four = play(MathToolGame(), ["<calc>1</calc>"] * 4 + [f"<answer>{answer}</answer>"], index=0)
    assert four.total_reward == 1.0 and four.results[-1].info["tool_calls"] == 4


def test_turn_cap_ends_an_episode_that_never_answers() -> None:
    game = MathToolGame(max_turns=3, format_penalty=0.1)
    episode = play(game, ["no", "<calc>1</calc>", "still no", "<answer>1</answer>"], index=0)
    assert len(episode.results) == 3 and episode.done
    assert [r.reward for r in episode.results] == [-0.1, 0.0, -0.1]
    assert episode.results[-1].info["reason"] == "turn_limit"
    assert episode.results[-1].info["correct"] is False


def test_step_after_done_or_before_reset_fails() -> None:
    game = MathToolGame()
    with pytest.raises(RuntimeError, match="before reset"):
        game.step("<answer>1</answer>")
    harness = GameHarness(game)
    harness.reset(index=0)
    harness.step("<answer>1</answer>")
    with pytest.raises(HarnessError, match="after the episode is done"):
        harness.step("<answer>1</answer>")
    with pytest.raises(RuntimeError, match="before reset"):
        game.step("<answer>1</answer>")


def test_deterministic_by_seed_index_and_split() -> None:
    first, same, other = MathToolGame(seed=7), MathToolGame(seed=7), MathToolGame(seed=8)
    for split, count in (("train", 50), ("eval", 32)):
        questions = [first.reset(index=i, split=split) for i in range(count)]
        assert questions == [same.reset(index=i, split=split) for i in reversed(range(count))][::-1]
        assert questions != [other.reset(index=i, split=split) for i in range(count)]
    fresh = MathToolGame(seed=7)
    assert [fresh.reset() for _ in range(3)] == [first.reset(index=i) for i in range(3)]
    assert fresh.reset(split="eval", seed=32 + 2) == fresh.reset(split="eval", index=2)


def test_train_and_eval_splits_are_disjoint() -> None:
    game = MathToolGame(seed=3, min_digits=1, max_digits=1, eval_size=20)  # 100 problems
    held_out = {game.reset(index=i, split="eval") for i in range(20)}
    assert len(held_out) == 20
    train = {game.reset(index=i) for i in range(1000)}
    assert not train & held_out and len(train) == 80
    hard = MathToolGame(seed=3)
    held_out = {hard.reset(index=i, split="eval") for i in range(32)}
    assert not {hard.reset(index=i) for i in range(500)} & held_out
    episode = play(hard, ["<answer>0</answer>"], split="eval", index=5)
    assert episode.results[0].info["split"] == "eval" and episode.results[0].info["index"] == 5


def test_operations_and_digits_are_configurable() -> None:
    game = MathToolGame(operations="+-", min_digits=4, max_digits=5)
    for index in range(30):
        question, answer = problem(game, index)
        body = question.rstrip("=")
        op = "+" if "+" in body else "-"
        a, b = (int(x) for x in body.split(op))
        assert 1000 <= a < 100000 and 1000 <= b < 100000
        assert int(answer) == (a + b if op == "+" else a - b)
    assert len(problem(MathToolGame(min_digits=4), 0)[0].split("*")[0]) == 4  # max follows min


@pytest.mark.parametrize(("config", "field"), [
    ({"seed": "x"}, "seed"),
    ({"operations": "/"}, "operations"),
    ({"operations": 5}, "operations"),
    ({"min_digits": 3, "max_digits": 2}, "min_digits"),
    ({"min_digits": "2"}, "min_digits"),
    ({"max_digits": 2.5}, "max_digits"),
    ({"eval_size": 0}, "eval_size"),
    ({"eval_size": 60, "min_digits": 1, "max_digits": 1}, "eval_size"),
    ({"max_tool_calls": -1}, "max_tool_calls"),
    ({"max_tool_calls": "4"}, "max_tool_calls"),
    ({"max_turns": 0}, "max_turns"),
    ({"format_penalty": -0.1}, "format_penalty"),
    ({"format_penalty": float("inf")}, "format_penalty"),
    ({"format_penalty": "0.1"}, "format_penalty"),
    ({"format_penalty": True}, "format_penalty"),
    ({"bare_answer": "yes"}, "bare_answer"),
    ({"system_prompt": ""}, "system_prompt"),
])
def test_bad_config_names_the_field(config: dict[str, object], field: str) -> None:
    with pytest.raises(GameConfigError, match=f"^{field}"):
        MathToolGame(**config)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"split": "test"}, "split"), ({"index": -1}, "index"), ({"index": 32, "split": "eval"}, "index"),
    ({"seed": -1}, "seed"),
])
def test_bad_reset_kwargs_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(GameConfigError, match=f"^{field}"):
        MathToolGame().reset(**kwargs)


def test_json_config_values_are_accepted() -> None:
    from_json = MathToolGame(seed=3.0, eval_size=10.0, max_tool_calls=2.0, format_penalty=1)
    assert from_json.reset(index=2.0) == MathToolGame(seed=3, eval_size=10).reset(index=2)
    assert from_json.max_tool_calls == 2 and from_json.format_penalty == 1.0
