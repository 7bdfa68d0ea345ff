"""The built-in math game: deterministic problems, disjoint train/eval splits, answer
extraction, rewards, config errors, JSONL datasets and SFT examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opentinker_env import GameConfigError, extract_answer, normalize_answer, play, read_jsonl, write_jsonl
from opentinker_runtime.games import MathGame, math_sft_examples
from opentinker_runtime.games.math_problems import ArithmeticSpec, columnwise


def questions(game: MathGame, split: str, count: int) -> list[str]:
    return [game.reset(index=i, split=split) for i in range(count)]


def test_short_prompts() -> None:
    game = MathGame()
    assert game.get_system_prompt() == "Answer with the number only."
    assert game.get_initial_user_message() == ""
    question = game.reset(index=0)
    assert len(question) == 4 and question[1] == "+" and question.endswith("=")


def test_same_seed_same_problems_other_seed_other_problems() -> None:
    config = {"seed": 7, "difficulty": "hard"}
    first = questions(MathGame(**config), "train", 50)
    assert first == questions(MathGame(**config), "train", 50)
    assert first != questions(MathGame(seed=8, difficulty="hard"), "train", 50)
    assert questions(MathGame(**config), "eval", 20) == questions(MathGame(**config), "eval", 20)


def test_problem_index_does_not_depend_on_order() -> None:
    game = MathGame(seed=3, difficulty="medium")
    forward = questions(game, "train", 30)
    assert [game.reset(index=i) for i in reversed(range(30))] == forward[::-1]


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_eval_is_disjoint_from_train(difficulty: str) -> None:
    game = MathGame(seed=1, difficulty=difficulty, eval_size=40)
    held_out = questions(game, "eval", 40)
    assert len(set(held_out)) == 40
    train = questions(game, "train", 2000)
    assert not set(train) & set(held_out)
    assert len(set(train)) > 40  # the train stream is not stuck on a few problems


def test_easy_train_covers_all_non_eval_problems() -> None:
    game = MathGame(seed=0, difficulty="easy", eval_size=32)
    assert len(set(questions(game, "train", 3000))) == 100 - 32


@pytest.mark.parametrize(("text", "expected"), [
    ("7", "7"),
    ("  -12 ", "-12"),
    ("The sum is \\boxed{42}.", "42"),
    ("\\boxed{1} no wait \\boxed{2}", "2"),
    ("\\boxed{3} and answer: 4", "3"),            # boxed wins over 'answer:'
    ("I think 5. Answer: 6", "6"),                # 'answer:' wins over the last number
    ("answer is 8, since 4+4=8 and 9", "8"),
    ("The answer is 8+5 = 13.", "13"),           # the answer given with its working
    ("Answer: 12 * 3 = 36", "36"),
    ("The answer is $2 x 3 = $6", "6"),
    ("answer is 7 (3+4=7)", "7"),                 # a number first: that number
    ("Answer: seven", "seven"),
    ("3+4 gives 7", "7"),                         # last number
    ("1,024", "1,024"),
    ("it is 3.50", "3.50"),
    ("no digits here", None),
    ("", None),
])
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(("a", "b"), [("1,024", "1024"), ("3.50", "3.5"), ("4.0", "4"),
                                      ("$5", "5"), ("+7", "7"), ("7.", "7"), (" Paris ", "paris")])
def test_normalize_answer_equates(a: str, b: str) -> None:
    assert normalize_answer(a) == normalize_answer(b)


def test_rewards_and_info() -> None:
    game = MathGame(seed=0, operations="*", min_digits=2, max_digits=2)
    question = game.reset(index=5)
    a, b = question.rstrip("=").split("*")
    product = str(int(a) * int(b))
    right = play(game, [f"\\boxed{{{product}}}"], index=5)
    assert right.done and right.total_reward == 1.0
    assert right.results[0].info == {"correct": True, "expected": product, "extracted": product,
                                     "split": "train", "index": 5}
    wrong = play(game, ["no idea"], index=5)
    assert wrong.total_reward == 0.0
    assert wrong.results[0].info["extracted"] is None and wrong.results[0].info["correct"] is False
    off_by_one = play(game, [str(int(product) + 1)], index=5)
    assert off_by_one.total_reward == 0.0 and off_by_one.results[0].done


def test_subtraction_never_goes_negative_and_answers_are_right() -> None:
    game = MathGame(seed=2, operations=["-", "+"], min_digits=1, max_digits=3)
    for index in range(200):
        question = game.reset(index=index)
        expected = eval(question.rstrip("="))  # noqa: S307 - our own arithmetic strings
        assert expected >= 0
        assert play(game, [str(expected)], index=index).total_reward == 1.0


@pytest.mark.parametrize("op", ["+", "-"])
def test_without_carry_every_column_stands_alone(op: str) -> None:
    game = MathGame(seed=3, operations=op, min_digits=1, max_digits=3, carry=False, eval_size=16)
    for index in range(300):
        question = game.reset(index=index)
        a, b = (int(x) for x in question.rstrip("=").split(op))
        columns = zip(str(a).zfill(3), str(b).zfill(3), strict=True)
        if op == "+":
            assert all(int(x) + int(y) <= 9 for x, y in columns), question
        else:
            assert all(int(x) >= int(y) for x, y in columns), question
        assert play(game, [str(a + b if op == "+" else a - b)], index=index).total_reward == 1.0


@pytest.mark.parametrize(("op", "low", "high"), [("+", 2, 2), ("-", 1, 2), ("+", 1, 3)])
def test_carry_free_space_size_counts_every_pair(op: str, low: int, high: int) -> None:
    spec = ArithmeticSpec(operations=(op,), min_digits=low, max_digits=high, carry=False)
    operands = [n for n in range(10 ** high) if low <= len(str(n)) <= high]
    pairs = sum(1 for a in operands for b in operands
                if (op == "+" or a >= b) and columnwise(op, a, b))
    assert spec.space_size() == pairs
    assert ArithmeticSpec(operations=("+",), min_digits=2, max_digits=2, carry=False).space_size() == 36 * 55


def test_reset_without_index_walks_the_split_and_seed_picks_the_problem() -> None:
    game = MathGame(seed=4, difficulty="medium")
    in_order = questions(game, "train", 3)
    fresh = MathGame(seed=4, difficulty="medium")
    assert [fresh.reset() for _ in range(3)] == in_order
    assert fresh.reset(seed=1) == in_order[1]
    assert fresh.reset(split="eval", seed=32 + 2) == fresh.reset(split="eval", index=2)


@pytest.mark.parametrize(("config", "field"), [
    ({"difficulty": "insane"}, "difficulty"),
    ({"operations": "/"}, "operations"),
    ({"operations": 5}, "operations"),
    ({"min_digits": 3, "max_digits": 2}, "min_digits"),
    ({"seed": "x"}, "seed"),
    ({"eval_size": 0}, "eval_size"),
    ({"eval_size": 60}, "eval_size"),  # more than half of the 100 easy problems
    ({"carry": "no"}, "carry"),
    ({"carry": False, "operations": "+*"}, "carry"),
])
def test_bad_config_names_the_field(config: dict[str, object], field: str) -> None:
    with pytest.raises(GameConfigError, match=f"^{field}"):
        MathGame(**config)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"split": "test"}, "split"), ({"index": -1}, "index"), ({"index": 32, "split": "eval"}, "index"),
])
def test_bad_reset_kwargs_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(GameConfigError, match=f"^{field}"):
        MathGame().reset(**kwargs)


def test_integral_floats_from_json_are_accepted() -> None:
    from_json = MathGame(seed=3.0, eval_size=10.0).reset(index=2.0)
    assert from_json == MathGame(seed=3, eval_size=10).reset(index=2)


def test_dataset_split_by_seed(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    write_jsonl(path, [{"question": f"What is {i} squared?", "answer": i * i} for i in range(20)])
    game = MathGame(dataset_path=str(path), eval_size=5, seed=1)
    held_out = questions(game, "eval", 5)
    train = {game.reset(index=i) for i in range(40)}
    assert len(train) == 15 and not train & set(held_out)
    assert held_out == questions(MathGame(dataset_path=str(path), eval_size=5, seed=1), "eval", 5)
    question = game.reset(index=0)
    number = int(question.split()[2])
    assert play(game, [f"answer: {number * number}"], index=0).total_reward == 1.0


def test_dataset_split_by_field_drops_train_copies_of_eval_questions(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    records = [{"question": "1+1=", "answer": "2", "split": "train"},
               {"question": "2+2=", "answer": "4", "split": "train"},
               {"question": "1+1=", "answer": "2", "split": "eval"}]
    write_jsonl(path, records)
    game = MathGame(dataset_path=str(path))
    assert questions(game, "train", 3) == ["2+2="] * 3
    assert questions(game, "eval", 1) == ["1+1="]


def test_dataset_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "1+1=", "answer": 2}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: invalid JSON"):
        MathGame(dataset_path=str(path))
    path.write_text('{"question": "1+1="}\n')
    with pytest.raises(ValueError, match="record 1 lacks answer"):
        MathGame(dataset_path=str(path))


def test_sft_examples_are_correct_chat_examples_from_the_train_split(tmp_path: Path) -> None:
    examples = math_sft_examples(50, seed=9, difficulty="medium")
    game = MathGame(seed=9, difficulty="medium")
    held_out = set(questions(game, "eval", 32))
    for example in examples:
        system, user, assistant = example["messages"]
        assert (system["role"], user["role"], assistant["role"]) == ("system", "user", "assistant")
        assert user["content"] not in held_out
        assert str(eval(user["content"].rstrip("="))) == assistant["content"]  # noqa: S307
    assert examples == math_sft_examples(50, seed=9, difficulty="medium")
    path = tmp_path / "sft" / "math.jsonl"
    assert write_jsonl(path, examples) == 50
    assert read_jsonl(path) == examples
    assert json.loads(path.read_text().splitlines()[0]) == examples[0]
