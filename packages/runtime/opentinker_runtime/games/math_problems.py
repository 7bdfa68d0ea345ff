"""Problem sets of the built-in math game, with disjoint train and eval splits.

Generated arithmetic: the eval split is `eval_size` distinct problems drawn from the stream
seeded "<seed>/eval"; train problem i is drawn from the stream "<seed>/train" at index i,
redrawing while the question is an eval question, so held-out accuracy measures problems the
policy never trained on. A JSONL dataset is split by each record's "split" field when present,
else by a seeded choice of `eval_size` records (train records repeating an eval question are
dropped).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentinker_env.data import JsonlDataset, SeededGenerator
from opentinker_env.game import SPLITS, GameConfigError

OPERATIONS = ("+", "-", "*")
DIFFICULTIES: dict[str, tuple[str, int, int]] = {
    "easy": ("+", 1, 1),     # "3+4=": 100 problems
    "medium": ("+-", 1, 2),  # "57-8="
    "hard": ("+-*", 2, 3),   # "123*45="
}


@dataclass(frozen=True, kw_only=True)
class MathProblem:
    """One question and its expected answer (as text)."""

    question: str
    answer: str


@dataclass(frozen=True, kw_only=True)
class ArithmeticSpec:
    """`a <op> b =` with operands of min_digits..max_digits digits; '-' never goes negative.

    With `carry=False`, '+' problems never carry (every column's digits sum to at most 9) and
    '-' problems never borrow (every digit of a is at least b's): each answer digit then
    depends on one column only, a skill a tiny model learns and generalises to unseen
    problems."""

    operations: tuple[str, ...]
    min_digits: int
    max_digits: int
    carry: bool = True

    def __post_init__(self) -> None:
        unknown = [op for op in self.operations if op not in OPERATIONS]
        if not self.operations or unknown:
            raise GameConfigError(f"operations: expected some of {' '.join(OPERATIONS)}, "
                                  f"got {''.join(self.operations)!r}")
        if not 1 <= self.min_digits <= self.max_digits <= 9:
            raise GameConfigError(f"min_digits/max_digits: need 1 <= min_digits <= max_digits <= 9, "
                                  f"got {self.min_digits}, {self.max_digits}")
        if not self.carry and "*" in self.operations:
            raise GameConfigError("carry: false applies to '+' and '-' only; drop '*' from operations")

    def operand_count(self) -> int:
        """How many distinct operands there are."""
        return sum(10 if d == 1 else 9 * 10 ** (d - 1)
                   for d in range(self.min_digits, self.max_digits + 1))

    def space_size(self) -> int:
        """How many distinct questions the spec can produce."""
        if not self.carry:
            return sum(self._columnwise_pairs(op) for op in self.operations)
        n = self.operand_count()
        return sum(n * (n + 1) // 2 if op == "-" else n * n for op in self.operations)

    def sample(self, rng: random.Random) -> MathProblem:
        op = rng.choice(self.operations)
        while True:
            a, b = self._operand(rng), self._operand(rng)
            if op == "-" and a < b:
                a, b = b, a
            if self.carry or columnwise(op, a, b):
                break
        answer = {"+": a + b, "-": a - b, "*": a * b}[op]
        return MathProblem(question=f"{a}{op}{b}=", answer=str(answer))

    def _columnwise_pairs(self, op: str) -> int:
        """Operand pairs (a, b) with no carry ('+') or no borrow ('-', a >= b), by length."""
        lengths = range(self.min_digits, self.max_digits + 1)
        return sum(_column_count(op, la, lb) for la in lengths for lb in lengths
                   if op == "+" or lb <= la)

    def _operand(self, rng: random.Random) -> int:
        digits = rng.randint(self.min_digits, self.max_digits)
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return rng.randint(low, 10 ** digits - 1)


def columnwise(op: str, a: int, b: int) -> bool:
    """True when `a op b` needs no carry ('+') or borrow ('-'): each column stands alone."""
    while a or b:
        low_a, low_b = a % 10, b % 10
        if (op == "+" and low_a + low_b > 9) or (op == "-" and low_a < low_b):
            return False
        a, b = a // 10, b // 10
    return True


def _column_count(op: str, len_a: int, len_b: int) -> int:
    """How many (a, b) of these digit lengths have every column without carry/borrow."""
    count = 1
    for column in range(max(len_a, len_b)):
        digits_a, digits_b = _column_digits(len_a, column), _column_digits(len_b, column)
        count *= sum(1 for x in digits_a for y in digits_b if columnwise(op, x, y))
    return count


def _column_digits(length: int, column: int) -> range:
    """Digits a number of `length` digits can have in `column` (0 = units); 0 past its end."""
    if column >= length:
        return range(0, 1)
    leading = column == length - 1 and length > 1
    return range(1, 10) if leading else range(0, 10)


class GeneratedProblems:
    """Seeded arithmetic problems: a fixed eval set and an unbounded, disjoint train stream."""

    def __init__(self, spec: ArithmeticSpec, *, seed: int, eval_size: int) -> None:
        if eval_size > spec.space_size() // 2:
            raise GameConfigError(f"eval_size: {eval_size} is more than half of the "
                                  f"{spec.space_size()} possible problems; lower it or widen "
                                  "operations/digits")
        self.eval_problems = _distinct(SeededGenerator(lambda rng, _: spec.sample(rng),
                                                       seed=f"{seed}/eval"), eval_size)
        held_out = {problem.question for problem in self.eval_problems}
        self._train = SeededGenerator(lambda rng, _: _sample_outside(spec, rng, held_out),
                                      seed=f"{seed}/train")

    def train(self, index: int) -> MathProblem:
        return self._train[index]

    def eval(self, index: int) -> MathProblem:
        return _pick(self.eval_problems, index, "eval")

    @property
    def train_size(self) -> int | None:
        """None: the train stream is unbounded."""
        return None


class DatasetProblems:
    """Problems from a JSONL file of {"question", "answer"[, "split"]} records."""

    def __init__(self, path: str | Path, *, seed: int, eval_size: int) -> None:
        dataset = JsonlDataset(path, required=("question", "answer"))
        problems = [_record_problem(record) for record in dataset]
        splits = [record.get("split") for record in dataset]
        if any(split is not None for split in splits):
            train, held_out = _split_by_field(problems, splits, path)
        else:
            train, held_out = _split_by_seed(problems, seed=seed, eval_size=eval_size)
        questions = {problem.question for problem in held_out}
        self.train_problems = [problem for problem in train if problem.question not in questions]
        self.eval_problems = held_out
        if not self.train_problems:
            raise GameConfigError(f"dataset_path: {path} leaves no train problems")

    def train(self, index: int) -> MathProblem:
        """Train problem `index`; indices wrap around, so epochs cycle through the set."""
        return self.train_problems[index % len(self.train_problems)]

    def eval(self, index: int) -> MathProblem:
        return _pick(self.eval_problems, index, "eval")

    @property
    def train_size(self) -> int | None:
        return len(self.train_problems)


def _distinct(source: SeededGenerator[MathProblem], count: int) -> list[MathProblem]:
    chosen: dict[str, MathProblem] = {}
    index = 0
    while len(chosen) < count:
        problem = source[index]
        chosen.setdefault(problem.question, problem)
        index += 1
    return list(chosen.values())


def _sample_outside(spec: ArithmeticSpec, rng: random.Random, held_out: set[str]) -> MathProblem:
    while True:
        problem = spec.sample(rng)
        if problem.question not in held_out:
            return problem


def _pick(problems: Sequence[MathProblem], index: int, split: str) -> MathProblem:
    if not 0 <= index < len(problems):
        raise GameConfigError(f"index: the {split} split has {len(problems)} problems "
                              f"(0..{len(problems) - 1}), got {index}")
    return problems[index]


def _record_problem(record: dict[str, Any]) -> MathProblem:
    return MathProblem(question=str(record["question"]), answer=str(record["answer"]))


def _split_by_field(problems: list[MathProblem], splits: list[Any],
                    path: str | Path) -> tuple[list[MathProblem], list[MathProblem]]:
    bad = sorted({str(split) for split in splits if split not in SPLITS})
    if bad:
        raise GameConfigError(f"dataset_path: {path} has split values {bad}; use 'train' or 'eval'")
    train = [p for p, split in zip(problems, splits, strict=True) if split == "train"]
    held_out = [p for p, split in zip(problems, splits, strict=True) if split == "eval"]
    return train, held_out


def _split_by_seed(problems: list[MathProblem], *, seed: int,
                   eval_size: int) -> tuple[list[MathProblem], list[MathProblem]]:
    if eval_size >= len(problems):
        raise GameConfigError(f"eval_size: {eval_size} leaves no train problems out of "
                              f"{len(problems)} in the dataset")
    chosen = set(random.Random(f"{seed}/split").sample(range(len(problems)), eval_size))
    held_out = [problems[i] for i in sorted(chosen)]
    return [p for i, p in enumerate(problems) if i not in chosen], held_out
