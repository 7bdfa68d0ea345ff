"""The built-in `math` game: single-turn arithmetic (or a JSONL question/answer dataset).

Prompts are deliberately short (a byte-level tokenizer spends a token per character): the
system prompt is "Answer with the number only.", the initial user message is empty and the
observation is the question, e.g. "3+4=". One step per episode: reward 1.0 when the extracted
answer (see `opentinker_env.answers`) equals the expected one, else 0.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentinker_env.answers import answers_match, extract_answer
from opentinker_env.config_fields import boolean as _bool
from opentinker_env.config_fields import integer as _int
from opentinker_env.config_fields import reset_position
from opentinker_env.config_fields import text as _text
from opentinker_env.game import AbstractGame, GameConfigError, StepResult, opening_messages
from opentinker_runtime.games.math_problems import (
    DIFFICULTIES,
    SPLITS,
    ArithmeticSpec,
    DatasetProblems,
    GeneratedProblems,
    MathProblem,
)

DEFAULT_SYSTEM_PROMPT = "Answer with the number only."
DEFAULT_EVAL_SIZE = 32


class MathGame(AbstractGame):
    """Single-turn arithmetic: reply to "3+4=" with the number; reward 1 for the exact answer."""

    multi_turn = False

    def __init__(self, *, seed: int = 0, difficulty: str = "easy", operations: str | list[str] | None = None,
                 min_digits: int | None = None, max_digits: int | None = None, carry: bool = True,
                 eval_size: int = DEFAULT_EVAL_SIZE, dataset_path: str | None = None,
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> None:
        """`difficulty` presets operations/digits (easy: 1-digit '+', medium: 1-2 digits '+-',
        hard: 2-3 digits '+-*'); explicit `operations`/`min_digits`/`max_digits` override it.
        `carry=False` keeps to problems without carries or borrows (see `ArithmeticSpec`).
        `dataset_path` (JSONL of question/answer) replaces generated problems."""
        seed, eval_size = _int("seed", seed), _int("eval_size", eval_size, low=1)
        self.system_prompt = _text("system_prompt", system_prompt)
        if dataset_path is not None:
            self.problems: GeneratedProblems | DatasetProblems = DatasetProblems(
                Path(_text("dataset_path", dataset_path)), seed=seed, eval_size=eval_size)
        else:
            spec = _arithmetic_spec(difficulty, operations, min_digits, max_digits, _bool("carry", carry))
            self.problems = GeneratedProblems(spec, seed=seed, eval_size=eval_size)
        self.next_index = {split: 0 for split in SPLITS}
        self.problem: MathProblem | None = None
        self.split, self.index = "train", 0

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"seed": 0, "difficulty": "easy", "eval_size": DEFAULT_EVAL_SIZE}

    def get_system_prompt(self) -> str:
        return self.system_prompt

    def get_initial_user_message(self) -> str:
        return ""

    def reset(self, *, index: int | None = None, split: str = "train", seed: int | None = None) -> str:
        """Problem `index` of `split` ("train" or "eval"); without an index, `seed` is used as
        the index (modulo the eval size for eval), else the next problem of that split."""
        position = self._position(split, index, seed)
        self.problem = self.problems.train(position) if split == "train" else self.problems.eval(position)
        self.split, self.index = split, position
        self.next_index[split] = position + 1
        return self.problem.question

    def step(self, action: str) -> StepResult:
        if self.problem is None:
            raise RuntimeError("step() before reset()")
        extracted = extract_answer(action)
        correct = answers_match(extracted, self.problem.answer)
        info = {"correct": correct, "expected": self.problem.answer, "extracted": extracted,
                "split": self.split, "index": self.index}
        self.problem = None
        return StepResult(observation="", reward=1.0 if correct else 0.0, done=True, info=info)

    def _position(self, split: str, index: int | None, seed: int | None) -> int:
        return reset_position(split, index, seed, next_index=self.next_index.get(split, 0),
                              eval_size=len(self.problems.eval_problems))


def math_sft_examples(n: int, *, seed: int = 0, start: int = 0,
                      **config: Any) -> list[dict[str, list[dict[str, str]]]]:
    """`n` chat examples {"messages": [system, user, assistant]} answering train problems
    start..start+n-1 correctly, for SFT warm-up. Pass the RL job's game config (same `seed`,
    difficulty, ...) so the examples come from its train split and never from its eval set."""
    game = MathGame(seed=seed, **config)
    examples = []
    for index in range(start, start + n):
        question = game.reset(index=index)
        messages = opening_messages(game.get_system_prompt(), game.get_initial_user_message(), question)
        answer = game.problems.train(index).answer
        examples.append({"messages": [*messages, {"role": "assistant", "content": answer}]})
    return examples


def _arithmetic_spec(difficulty: str, operations: str | list[str] | None,
                     min_digits: int | None, max_digits: int | None, carry: bool) -> ArithmeticSpec:
    if difficulty not in DIFFICULTIES:
        raise GameConfigError(f"difficulty: expected one of {', '.join(DIFFICULTIES)}, got {difficulty!r}")
    preset_ops, preset_min, preset_max = DIFFICULTIES[difficulty]
    ops = _operations(preset_ops if operations is None else operations)
    low = preset_min if min_digits is None else _int("min_digits", min_digits)
    high = max(preset_max, low) if max_digits is None else _int("max_digits", max_digits)
    return ArithmeticSpec(operations=ops, min_digits=low, max_digits=high, carry=carry)


def _operations(value: object) -> tuple[str, ...]:
    """'+-' or ['+', '-'] -> ('+', '-'), duplicates dropped."""
    parts = [value] if isinstance(value, str) else value
    if not isinstance(parts, (list, tuple)) or not all(isinstance(p, str) for p in parts):
        raise GameConfigError(f"operations: expected a string like '+-*' or a list, got {value!r}")
    return tuple(dict.fromkeys("".join(parts).replace(" ", "")))
