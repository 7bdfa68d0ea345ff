"""A seated game run in this process (no EnvHost): for warm-up transcripts, tests and local tools.

`local_environments(make_game)` is a `SeatedEnvironmentFactory` the Agent Protocol can host
matches of: each match builds `make_game(config)` and steps it directly (a sync game only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from opentinker_env.game import AbstractGame, NotYourTurn
from opentinker_coordinator.protocol.seated_environment import (
    EnvironmentBroke,
    MatchEnvironmentRef,
    SeatedEnvironmentFactory,
    SeatedStart,
    SeatedStep,
)


class InProcessSeatedEnvironment:
    """Steps a seated game in this process; sleeps `delay()` seconds before each step."""

    def __init__(self, game: AbstractGame, delay: Callable[[], float] = lambda: 0.0) -> None:
        self.game, self.delay = game, delay
        self.steps: list[tuple[str, str]] = []
        self.closed = False

    async def start(self, reset_kwargs: Mapping[str, Any], seed: int) -> SeatedStart:
        observation = self.game.reset(**dict(reset_kwargs))
        return SeatedStart(seats=tuple(self.game.seats), system_prompt=self.game.get_system_prompt(),
                           initial_user_message=self.game.get_initial_user_message(), observation=observation)

    async def step(self, action: str, seat: str) -> SeatedStep:
        await asyncio.sleep(self.delay())
        try:
            result = self.game.step(action, seat=seat)  # type: ignore[call-arg]
        except NotYourTurn as error:
            raise EnvironmentBroke(f"the game refused the turn order: {error}") from error
        self.steps.append((seat, action))
        return SeatedStep(observation=result.observation, reward=result.reward, done=result.done,
                          info=result.info)

    async def close(self) -> None:
        self.closed = True


def local_environments(make_game: Callable[[Mapping[str, Any]], AbstractGame],
                       delay: Callable[[], float] = lambda: 0.0,
                       opened: list | None = None) -> SeatedEnvironmentFactory:
    """A factory building `make_game(config)` per match; each environment made is appended to
    `opened` when given."""
    def make(environment: MatchEnvironmentRef, job_id: str) -> InProcessSeatedEnvironment:
        env = InProcessSeatedEnvironment(make_game(environment.config), delay)
        if opened is not None:
            opened.append(env)
        return env
    return make
