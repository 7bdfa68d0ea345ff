"""The built-in `math_tool` game: multi-turn arithmetic with a calculator tool.

The model may call a calculator, sees its result, then answers. Prompts are short (a
byte-level tokenizer spends a token per character): the system prompt is
"Calculator: <calc>1+2</calc>. Reply <answer>N</answer>.", the initial user message is empty
and the first observation is the question, e.g. "69*216=". Problems come from the same
seeded generator as the `math` game (disjoint train/eval splits); the default is 2-3 digit
multiplication, hard enough that the tool helps.

Protocol, one model turn at a time:

* ``<answer>N</answer>`` anywhere in the turn ends the episode: reward 1.0 when N equals the
  expected answer (normalised as in `opentinker_env.answers`: "14,904" == "14904"), else 0.0.
  It wins over any `<calc>` in the same turn; with several, the last one counts.
* ``<calc>EXPR</calc>`` (one or more) calls the calculator (`opentinker_runtime.games.calculator`:
  numbers, + - * / // % ** ^, parentheses). The observation is one line per call,
  "= RESULT" or "error: MESSAGE" (e.g. "= 14904", "error: division by zero"); reward 0, not
  done. Calls past `max_tool_calls` in an episode end it with reward 0.
* A turn with neither gets the observation "Use <calc>EXPR</calc> or <answer>N</answer>."
  and reward -`format_penalty`. With `bare_answer=True` such a turn is instead taken as the
  answer when it holds a number (extracted by `opentinker_env.answers.extract_answer`).
* After `max_turns` turns without an answer the episode ends (that turn's reward as above).

A closing tag may be missing at the very end of a turn (generation often stops at
"</calc>" without emitting it): "<calc>12*34" is the call "12*34".

    game = MathToolGame(seed=0)
    game.reset(index=0)                  # "69*216="
    game.step("<calc>69*216</calc>")     # observation "= 14904", reward 0.0, not done
    game.step("<answer>14904</answer>")  # reward 1.0, done, info["correct"] is True

The final step's info has "correct", "expected", "extracted", "split", "index",
"tool_calls", "turns" and "reason" ("answer", "tool_call_limit" or "turn_limit"); earlier
steps have "tool_calls" and "turns".
"""

from __future__ import annotations

import re
from typing import Any

from opentinker_env.answers import answers_match, extract_answer
from opentinker_runtime.games.calculator import CalculatorError, calculate
from opentinker_env.game import AbstractGame, StepResult
from opentinker_env.config_fields import boolean as _bool
from opentinker_env.config_fields import finite
from opentinker_env.config_fields import integer as _int
from opentinker_env.config_fields import reset_position
from opentinker_env.config_fields import text as _text
from opentinker_runtime.games.math_game import _operations
from opentinker_runtime.games.math_problems import SPLITS, ArithmeticSpec, GeneratedProblems, MathProblem

DEFAULT_SYSTEM_PROMPT = "Calculator: <calc>1+2</calc>. Reply <answer>N</answer>."
FORMAT_REMINDER = "Use <calc>EXPR</calc> or <answer>N</answer>."
DEFAULT_EVAL_SIZE = 32
DEFAULT_MAX_TOOL_CALLS = 4
DEFAULT_MAX_TURNS = 8
DEFAULT_FORMAT_PENALTY = 0.1
MAX_EXTRACTED_CHARS = 100
"""info["extracted"] keeps at most this many characters of the answer."""

CALC_RE = re.compile(r"<calc>(.*?)(?:</calc>|\Z)", re.DOTALL)
ANSWER_RE = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.DOTALL)


class MathToolGame(AbstractGame):
    """Multi-turn arithmetic with a calculator tool: <calc>EXPR</calc>, then <answer>N</answer>."""

    multi_turn = True

    def __init__(self, *, seed: int = 0, operations: str | list[str] = "*", min_digits: int = 2,
                 max_digits: int | None = None, eval_size: int = DEFAULT_EVAL_SIZE,
                 max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS, max_turns: int = DEFAULT_MAX_TURNS,
                 format_penalty: float = DEFAULT_FORMAT_PENALTY, bare_answer: bool = False,
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> None:
        """Problems are `a <op> b =` with `operations` among '+-*' and operands of
        min_digits..max_digits digits (max_digits defaults to max(3, min_digits))."""
        seed, eval_size = _int("seed", seed), _int("eval_size", eval_size, low=1)
        self.max_tool_calls = _int("max_tool_calls", max_tool_calls, low=0)
        self.max_turns = _int("max_turns", max_turns, low=1)
        self.format_penalty = finite("format_penalty", format_penalty, low=0)
        self.bare_answer = _bool("bare_answer", bare_answer)
        self.system_prompt = _text("system_prompt", system_prompt)
        low = _int("min_digits", min_digits)
        high = max(3, low) if max_digits is None else _int("max_digits", max_digits)
        spec = ArithmeticSpec(operations=_operations(operations), min_digits=low, max_digits=high)
        self.problems = GeneratedProblems(spec, seed=seed, eval_size=eval_size)
        self.next_index = {split: 0 for split in SPLITS}
        self.problem: MathProblem | None = None
        self.split, self.index = "train", 0
        self.tool_calls = self.turns = 0

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"seed": 0, "operations": "*", "min_digits": 2, "max_digits": 3,
                "eval_size": DEFAULT_EVAL_SIZE, "max_tool_calls": DEFAULT_MAX_TOOL_CALLS,
                "max_turns": DEFAULT_MAX_TURNS, "format_penalty": DEFAULT_FORMAT_PENALTY,
                "bare_answer": False}

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
        self.tool_calls = self.turns = 0
        return self.problem.question

    def step(self, action: str) -> StepResult:
        if self.problem is None:
            raise RuntimeError("step() before reset()")
        self.turns += 1
        answers = ANSWER_RE.findall(action)
        if answers:
            return self._finish(answers[-1].strip(), "answer")
        calls = CALC_RE.findall(action)
        if calls:
            return self._tool_calls(calls)
        if self.bare_answer:
            extracted = extract_answer(action)
            if extracted is not None:
                return self._finish(extracted, "answer")
        return self._continue(FORMAT_REMINDER, -self.format_penalty)

    def _tool_calls(self, calls: list[str]) -> StepResult:
        self.tool_calls += len(calls)
        if self.tool_calls > self.max_tool_calls:
            return self._finish(None, "tool_call_limit")
        return self._continue("\n".join(_call(expression) for expression in calls), 0.0)

    def _continue(self, observation: str, reward: float) -> StepResult:
        if self.turns >= self.max_turns:
            return self._finish(None, "turn_limit", reward=reward)
        info = {"tool_calls": self.tool_calls, "turns": self.turns}
        return StepResult(observation=observation, reward=reward, done=False, info=info)

    def _finish(self, extracted: str | None, reason: str, *, reward: float | None = None) -> StepResult:
        assert self.problem is not None
        correct = reason == "answer" and answers_match(extracted, self.problem.answer)
        if extracted is not None and len(extracted) > MAX_EXTRACTED_CHARS:
            extracted = extracted[:MAX_EXTRACTED_CHARS]
        info = {"correct": correct, "expected": self.problem.answer, "extracted": extracted,
                "split": self.split, "index": self.index, "tool_calls": self.tool_calls,
                "turns": self.turns, "reason": reason}
        self.problem = None
        if reward is None:
            reward = 1.0 if correct else 0.0
        return StepResult(observation="", reward=reward, done=True, info=info)

    def _position(self, split: str, index: int | None, seed: int | None) -> int:
        return reset_position(split, index, seed, next_index=self.next_index.get(split, 0),
                              eval_size=len(self.problems.eval_problems))


def _call(expression: str) -> str:
    """One tool call's observation line: "= RESULT" or "error: MESSAGE"."""
    try:
        return f"= {calculate(expression.strip())}"
    except CalculatorError as error:
        return f"error: {error}"
