"""What a game's reset() and step() return, checked before it can reach the wire.

The call bodies here run wherever the game lives (a worker thread of the EnvHost, or the game's
sandbox process), so both isolation modes apply the same checks with the same messages: an
observation or prompt must be a str of at most `max_chars` characters that UTF-8 can encode
(a lone surrogate such as "\\udcff" cannot be sent in a protobuf string), and a step's info
must be a JSON dict whose text UTF-8 can encode. The process mode checks a child's answer
again in the EnvHost (`reset_outcome_from_wire`, `step_result_from_wire`): a child is never
trusted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentinker_env import Game, StepResult, check_observation, check_step_result


@dataclass(frozen=True, kw_only=True)
class ResetOutcome:
    """What a reset answers: the prompts and reset()'s observation."""

    system_prompt: str
    initial_user_message: str
    observation: str
    info: dict[str, Any] = field(default_factory=dict)


def check_utf8_text(value: str, where: str) -> str:
    """`value` if UTF-8 can encode it, else ValueError naming `where`."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{where} is not valid UTF-8 text: {error}") from None
    return value


def check_utf8_json(value: Mapping[str, Any], where: str) -> None:
    """ValueError unless every string in the JSON value `value` is UTF-8 encodable."""
    if not value:
        return
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{where} is not valid UTF-8 text: {error}") from None


def checked_text(value: object, where: str, max_chars: int) -> str:
    """A str within `max_chars` characters that UTF-8 can encode (TypeError/ValueError)."""
    return check_utf8_text(check_observation(value, where, max_chars), f"{where} observation")


def checked_step_result(value: object, where: str, max_chars: int) -> StepResult:
    result = check_step_result(value, where, max_chars)
    check_utf8_text(result.observation, f"{where} observation")
    check_utf8_json(result.info, f"{where} info")
    return result


def reset_outcome(game: Game, observation: object, max_chars: int) -> ResetOutcome:
    """The prompts (asked of the game now) and reset()'s observation, each checked."""
    return ResetOutcome(
        system_prompt=checked_text(game.get_system_prompt(), "get_system_prompt()", max_chars),
        initial_user_message=checked_text(game.get_initial_user_message(),
                                          "get_initial_user_message()", max_chars),
        observation=checked_text(observation, "reset()", max_chars))


def reset_call(game: Game, arguments: dict[str, Any], *, is_async: bool,
               max_chars: int) -> Callable[[], Any]:
    """reset() then the prompts, as one game call (a coroutine function for async games)."""
    async def run_async() -> ResetOutcome:
        return reset_outcome(game, await game.reset(**arguments), max_chars)  # type: ignore[misc]

    return run_async if is_async else lambda: reset_outcome(game, game.reset(**arguments), max_chars)


def step_call(game: Game, action: str, seat_kwargs: dict[str, str], *, is_async: bool,
              max_chars: int, truncated: bool = False) -> Callable[[], Any]:
    """step(action) as one game call, its result checked; `on_truncated(action)` instead for
    an action a token limit cut off."""
    method, name = (game.on_truncated, "on_truncated()") if truncated else (game.step, "step()")

    async def run_async() -> StepResult:
        return checked_step_result(await method(action, **seat_kwargs), name, max_chars)  # type: ignore[misc]

    return run_async if is_async else lambda: checked_step_result(method(action, **seat_kwargs), name, max_chars)


def step_request(action: str, seat_kwargs: dict[str, str], truncated: bool) -> dict[str, Any]:
    """A step's call to a game process ("truncated" only when set: the common frame stays small)."""
    request = {"call": "step", "action": action, "seat_kwargs": seat_kwargs}
    if truncated:
        request["truncated"] = True
    return request


def step_method(truncated: bool) -> str:
    """The game method a step calls: "step()", or "on_truncated()" for a cut-off action."""
    return "on_truncated()" if truncated else "step()"


def reset_outcome_to_wire(outcome: ResetOutcome) -> dict[str, Any]:
    return {"system_prompt": outcome.system_prompt, "initial_user_message": outcome.initial_user_message,
            "observation": outcome.observation}


def step_result_to_wire(result: StepResult) -> dict[str, Any]:
    return {"observation": result.observation, "reward": result.reward, "done": result.done,
            "info": result.info}


def reset_outcome_from_wire(value: object, max_chars: int) -> ResetOutcome:
    """A child's reset answer, checked as if the game had returned it (TypeError/ValueError)."""
    fields = _wire_dict(value, ("system_prompt", "initial_user_message", "observation"))
    return ResetOutcome(
        system_prompt=checked_text(fields["system_prompt"], "get_system_prompt()", max_chars),
        initial_user_message=checked_text(fields["initial_user_message"], "get_initial_user_message()",
                                          max_chars),
        observation=checked_text(fields["observation"], "reset()", max_chars))


def step_result_from_wire(value: object, max_chars: int) -> StepResult:
    """A child's step answer, checked as if the game had returned it (TypeError/ValueError)."""
    fields = _wire_dict(value, ("observation", "reward", "done", "info"))
    if not fields["info"] and type(fields["info"]) is dict and type(fields["reward"]) is float:
        return _checked_plain_step(fields, max_chars)
    return checked_step_result(StepResult(**fields), "step()", max_chars)


def _checked_plain_step(fields: dict[str, Any], max_chars: int) -> StepResult:
    """The common answer (a float reward, no info) checked as StepResult() and
    checked_step_result() would, without their JSON encoding of the empty info."""
    observation, reward, done = fields["observation"], fields["reward"], fields["done"]
    if not isinstance(observation, str):
        raise TypeError(f"StepResult.observation must be str, got {type(observation).__name__}")
    if not math.isfinite(reward):
        raise ValueError(f"StepResult.reward must be finite, got {reward}")
    if not isinstance(done, bool):
        raise TypeError(f"StepResult.done must be bool, got {type(done).__name__}")
    result = object.__new__(StepResult)  # every field checked above; __post_init__ would re-encode {}
    for name, item in (("observation", observation), ("reward", reward), ("done", done), ("info", {})):
        object.__setattr__(result, name, item)
    return checked_step_result(result, "step()", max_chars)


_NAME_SETS: dict[tuple[str, ...], frozenset[str]] = {}


def _wire_dict(value: object, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict) or value.keys() != _NAME_SETS.setdefault(names, frozenset(names)):
        raise TypeError(f"expected an object with exactly {', '.join(names)}, got {str(value)[:200]!r}")
    return value
