"""Play a game in-process, with the checks the EnvHost applies, so a game is unit-tested
without any service:

    episode = play(MyGame(), ["e4", "Nf3"], level=2)
    assert episode.done and episode.total_reward == 1.0

Checks: reset returns a str and step a StepResult (observations within the size limit);
step before reset, or after the episode is done, raises HarnessError.

A reply cut off by a token limit goes to the game's `on_truncated` (as in a job): mark it with
`Cut`, e.g. `play(MyGame(), ["e4", Cut("Let me think about this very")])`, or
`harness.step(text, truncated=True)`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from opentinker_env.game import (
    DEFAULT_MAX_OBSERVATION_CHARS,
    AsyncAbstractGame,
    Game,
    StepResult,
    check_observation,
    check_step_result,
    opening_messages,
)


class Cut(str):
    """An action a token limit cut off: `play` and `GameHarness.step` hand it to the game's
    `on_truncated` instead of `step`."""

    __slots__ = ()


class HarnessError(RuntimeError):
    """The game was driven out of order (step before reset, step after done)."""


@dataclass(frozen=True, kw_only=True)
class Episode:
    """One played episode: the opening, every action and every step's result."""

    system_prompt: str
    initial_user_message: str
    observation: str
    actions: tuple[str, ...] = ()
    results: tuple[StepResult, ...] = ()

    @property
    def done(self) -> bool:
        return bool(self.results) and self.results[-1].done

    @property
    def total_reward(self) -> float:
        return sum(result.reward for result in self.results)

    def messages(self) -> list[dict[str, str]]:
        """The chat transcript: system, user (prompt rule), then assistant actions, each followed
        by a user turn with its observation unless that step ended the episode."""
        chat = opening_messages(self.system_prompt, self.initial_user_message, self.observation)
        for action, result in zip(self.actions, self.results, strict=True):
            chat.append({"role": "assistant", "content": action})
            if not result.done:
                chat.append({"role": "user", "content": result.observation})
        return chat


class GameHarness:
    """Drives one game (sync or async) episode by episode; `reset`/`step` for sync games,
    `areset`/`astep` for either kind."""

    def __init__(self, game: Game, *, max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> None:
        self.game = game
        self.max_observation_chars = max_observation_chars
        self.episode: Episode | None = None

    def reset(self, **kwargs: Any) -> str:
        self._require_sync("reset")
        return self._opened(self.game.reset(**kwargs))

    def step(self, action: str, *, truncated: bool = False) -> StepResult:
        """The game's step (its on_truncated for a cut-off action: `truncated` or a `Cut`)."""
        self._require_sync("step")
        self._require_open_episode()
        cut = truncated or isinstance(action, Cut)
        return self._stepped(action, self.game.on_truncated(action) if cut else self.game.step(action), cut)

    async def areset(self, **kwargs: Any) -> str:
        return self._opened(await _maybe_await(self.game.reset(**kwargs)))

    async def astep(self, action: str, *, truncated: bool = False) -> StepResult:
        self._require_open_episode()
        cut = truncated or isinstance(action, Cut)
        method = self.game.on_truncated if cut else self.game.step
        return self._stepped(action, await _maybe_await(method(action)), cut)

    def _opened(self, observation: object) -> str:
        observation = check_observation(observation, "reset()", self.max_observation_chars)
        self.episode = Episode(system_prompt=self.game.get_system_prompt(),
                               initial_user_message=self.game.get_initial_user_message(),
                               observation=observation)
        return observation

    def _stepped(self, action: str, result: object, cut: bool = False) -> StepResult:
        result = check_step_result(result, "on_truncated()" if cut else "step()", self.max_observation_chars)
        episode = self.episode
        assert episode is not None
        self.episode = Episode(system_prompt=episode.system_prompt,
                               initial_user_message=episode.initial_user_message,
                               observation=episode.observation, actions=(*episode.actions, action),
                               results=(*episode.results, result))
        return result

    def _require_open_episode(self) -> None:
        if self.episode is None:
            raise HarnessError("step() before reset()")
        if self.episode.done:
            raise HarnessError("step() after the episode is done; call reset() first")

    def _require_sync(self, method: str) -> None:
        if isinstance(self.game, AsyncAbstractGame):
            raise HarnessError(f"{type(self.game).__name__} is async: use await harness.a{method}()")


def play(game: Game, actions: Iterable[str], **reset_kwargs: Any) -> Episode:
    """Reset with `reset_kwargs`, then step through `actions` until the episode is done
    (remaining actions are not played: compare `episode.actions`). Async games run in
    `asyncio.run`; inside a running event loop use `aplay`."""
    if isinstance(game, AsyncAbstractGame):
        return asyncio.run(aplay(game, actions, **reset_kwargs))
    harness = GameHarness(game)
    harness.reset(**reset_kwargs)
    for action in actions:
        if harness.step(action).done:
            break
    assert harness.episode is not None
    return harness.episode


async def aplay(game: Game, actions: Iterable[str], **reset_kwargs: Any) -> Episode:
    """`play` for an event loop; works for sync and async games."""
    harness = GameHarness(game)
    await harness.areset(**reset_kwargs)
    for action in actions:
        if (await harness.astep(action)).done:
            break
    assert harness.episode is not None
    return harness.episode


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
