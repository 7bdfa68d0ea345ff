"""The environment interface: `AbstractGame` (sync), `AsyncAbstractGame` and `StepResult`.

A game is constructed with its config as keyword arguments (`MyGame(**config)`), plays one
episode per `reset(**kwargs)` and advances with `step(action)`. The EnvHost and the local
harness (`opentinker_env.harness`) drive both kinds the same way.

Prompt rule (shared by rollout, SFT data and the harness): the opening messages are
`[system: get_system_prompt()]` followed by one user message whose content is
`"\\n\\n".join` of the non-empty parts of (get_initial_user_message(), reset's observation).
"""

from __future__ import annotations

import abc
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

SPLITS = ("train", "eval")
"""The `split` a game's reset takes: problems trained on, and held-out problems."""

DEFAULT_MAX_OBSERVATION_CHARS = 100_000
"""Longest observation the harness and (by default) the EnvHost accept."""


class GameConfigError(ValueError):
    """A game's constructor config or reset kwargs are invalid; the message names the field.

    The EnvHost answers INVALID_ARGUMENT for it; any other exception from a game is a failure
    of that game (ENVIRONMENT_FAILED with its traceback).
    """


class NotYourTurn(ValueError):
    """A seated game's `step` came from a seat that is not to move; the message says who is.

    The EnvHost answers FAILED_PRECONDITION (reason NOT_YOUR_TURN) and the episode goes on:
    the caller's mistake, not the game's failure.
    """


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """What one `step(action)` returns; validated on construction."""

    observation: str = ""
    """Text shown to the model next (the next user turn); may be empty when `done`."""
    reward: float = 0.0
    """Reward for this step; a finite number (ints are converted to float)."""
    done: bool = False
    """True when the episode is over; the next call must be `reset`."""
    info: dict[str, Any] = field(default_factory=dict)
    """JSON-compatible extras (metrics, the expected answer, ...); keys are strings."""

    def __post_init__(self) -> None:
        if not isinstance(self.observation, str):
            raise TypeError(f"StepResult.observation must be str, got {type(self.observation).__name__}")
        object.__setattr__(self, "reward", _finite_reward(self.reward))
        if not isinstance(self.done, bool):
            raise TypeError(f"StepResult.done must be bool, got {type(self.done).__name__}")
        check_json_dict(self.info, "StepResult.info")


def _finite_reward(reward: object) -> float:
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise TypeError(f"StepResult.reward must be a number, got {type(reward).__name__}")
    if not math.isfinite(reward):
        raise ValueError(f"StepResult.reward must be finite, got {reward}")
    return float(reward)


def check_json_dict(value: object, where: str) -> None:
    """TypeError unless `value` is a dict with str keys that JSON can encode (no NaN)."""
    if type(value) is dict and not value:
        return  # the common case (no info): nothing to encode
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise TypeError(f"{where} must be a dict with str keys, got {type(value).__name__}")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{where} must be JSON-compatible: {error}") from None


class _GameMetadata:
    """Class-level facts the EnvHost lists (`ListEnvironments`); override in a subclass."""

    description: ClassVar[str] = ""
    """One line shown by ListEnvironments; defaults to the first line of the class docstring."""
    multi_turn: ClassVar[bool] = True
    """False for single-turn games (one step per episode)."""
    seats: ClassVar[tuple[str, ...]] = ()
    """Seats of a multi-agent game, in turn order (the first moves first); a seated game's `step`
    also takes `seat=` (keyword), where "" means "the seat to move" (how a single-agent session
    of a seated game plays).

    In a Coordinator match (multi-agent jobs) the step's `info` may say more, all optional:
    "to_move" (the seat to move next; default: the next seat in order after an accepted
    action), "error" (the action was rejected: the same seat moves again), "observations"
    ({seat: text}, each seat's private view; default: the observation is public), "rewards"
    ({seat: reward} of this step; default: the reward goes to the actor; on the final step they
    are the match's result) and "outcomes" ({seat: "win" | "loss" | "draw" | ...} at the end)."""

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """An example constructor config (JSON-compatible), shown by ListEnvironments."""
        return {}

    @classmethod
    def describe(cls) -> str:
        doc = (cls.__doc__ or "").strip()
        return cls.description or (doc.splitlines()[0] if doc else cls.__name__)

    def close(self) -> None:
        """Release resources; called once when the session closes. Default: nothing."""


class AbstractGame(_GameMetadata, abc.ABC):
    """A synchronous game. The EnvHost runs its methods in a worker thread, so blocking is fine."""

    @abc.abstractmethod
    def get_system_prompt(self) -> str:
        """The system message of every episode."""

    @abc.abstractmethod
    def get_initial_user_message(self) -> str:
        """Text that opens the first user turn, before reset's observation (may be empty)."""

    @abc.abstractmethod
    def reset(self, **kwargs: Any) -> str:
        """Start an episode (kwargs: per-episode config); the first observation."""

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply the model's action text."""

    def on_truncated(self, action: str, **kwargs: Any) -> StepResult:
        """A reply a token limit cut off (it did not end by itself): what it does to the episode.

        Default: `step(action)`, so a reply that rambles to the limit is judged like any other
        reply (usually as an invalid one): babbling never beats playing. Override to penalise
        it, end the episode, or forgive it; the episode goes on when the result is not `done`
        (unless no tokens are left). A seated game gets `seat=` as in `step`. Jobs may instead
        end the episode at a cut reply without asking the game
        (`limits.truncated_actions: TRUNCATED_ACTIONS_END_EPISODE`), and may add
        `limits.truncation_penalty` either way."""
        return self.step(action, **kwargs)


class AsyncAbstractGame(_GameMetadata, abc.ABC):
    """A game whose reset/step are coroutines (e.g. they call a remote tool); must not block."""

    @abc.abstractmethod
    def get_system_prompt(self) -> str:
        """The system message of every episode."""

    @abc.abstractmethod
    def get_initial_user_message(self) -> str:
        """Text that opens the first user turn, before reset's observation (may be empty)."""

    @abc.abstractmethod
    async def reset(self, **kwargs: Any) -> str:
        """Start an episode (kwargs: per-episode config); the first observation."""

    @abc.abstractmethod
    async def step(self, action: str) -> StepResult:
        """Apply the model's action text."""

    async def on_truncated(self, action: str, **kwargs: Any) -> StepResult:
        """A reply a token limit cut off: see `AbstractGame.on_truncated` (default: `step`)."""
        return await self.step(action, **kwargs)


Game = AbstractGame | AsyncAbstractGame
GameClass = type[AbstractGame] | type[AsyncAbstractGame]


def is_game_class(value: object) -> bool:
    """True for a concrete subclass of AbstractGame or AsyncAbstractGame."""
    return (isinstance(value, type) and issubclass(value, (AbstractGame, AsyncAbstractGame))
            and not getattr(value, "__abstractmethods__", None))


def opening_user_content(initial_user_message: str, observation: str) -> str:
    """The first user message: the non-empty parts joined by a blank line."""
    return "\n\n".join(part for part in (initial_user_message, observation) if part)


def opening_messages(system_prompt: str, initial_user_message: str,
                     observation: str) -> list[dict[str, str]]:
    """[system, user] chat messages that open an episode (the prompt rule)."""
    user = opening_user_content(initial_user_message, observation)
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]


def check_step_result(value: object, where: str,
                      max_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> StepResult:
    """`value` if it is a StepResult whose observation is within `max_chars`."""
    if not isinstance(value, StepResult):
        raise TypeError(f"{where} must return StepResult, got {type(value).__name__}")
    check_observation(value.observation, where, max_chars)
    return value


def check_observation(value: object, where: str,
                      max_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> str:
    """`value` if it is a str of at most `max_chars` characters, else TypeError/ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"{where} must return str, got {type(value).__name__}")
    if len(value) > max_chars:
        raise ValueError(f"{where} returned {len(value)} characters; the limit is {max_chars}")
    return value
