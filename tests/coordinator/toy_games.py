"""Seated games for protocol tests that are not gomoku, and a factory serving several games.

`CounterRace` has THREE seats by default (2..4 with `players`), so the tests show the match is
not hard-wired to two seats. Players take turns adding 1..`max_add` to a shared counter; whoever
brings it to `target` or beyond wins (+1; every other seat -1/(players-1): zero-sum). Adding
`max_add` skips the next seat (the game names the seat to move in `info["to_move"]` only then,
so both the default turn order and the game's own word are exercised; with two players the same
seat moves again). Every seat has a private secret, and every step's views are private
(`info["observations"]`): a seat's view holds "secret:<seat>:" of that seat only. A rejected
move (not an integer in 1..max_add) costs `invalid_move_penalty`, is news to the actor alone
and the actor moves again; a rejected move beyond `max_invalid_moves` forfeits (-1, the others
share +1; its info has "error" too, as gomoku's forfeiting move).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from typing import Any

from opentinker_env.game import AbstractGame, NotYourTurn, StepResult
from opentinker_runtime.games.gomoku_game import GomokuGame
from opentinker_runtime.games.math_game import MathGame
from opentinker_coordinator.protocol.seated_environment import EnvironmentBroke, MatchEnvironmentRef, SeatedStart, SeatedStep
from tests.coordinator.seated_games import InProcessSeatedEnvironment

SEAT_NAMES = ("north", "east", "south", "west")


def secret_tag(seat: str) -> str:
    """What only `seat` may ever see."""
    return f"secret:{seat}:"


class CounterRace(AbstractGame):
    """Add 1..max_add to a shared counter in turn; reaching `target` wins."""

    def __init__(self, *, players: int = 3, target: int = 10, max_add: int = 3,
                 invalid_move_penalty: float = -0.1, max_invalid_moves: int = 2) -> None:
        if not 2 <= int(players) <= len(SEAT_NAMES):
            raise ValueError(f"players: expected 2..{len(SEAT_NAMES)}, got {players}")
        self.seats = SEAT_NAMES[:int(players)]  # instance attribute: the number of seats varies
        self.target, self.max_add = int(target), int(max_add)
        self.invalid_move_penalty, self.max_invalid_moves = float(invalid_move_penalty), int(max_invalid_moves)
        self.counter, self.to_move, self.done = 0, self.seats[0], True
        self.invalid = {seat: 0 for seat in self.seats}
        self.secrets = {seat: "" for seat in self.seats}

    def get_system_prompt(self) -> str:
        return f"Counter race to {self.target}: reply with a number from 1 to {self.max_add}."

    def get_initial_user_message(self) -> str:
        return ""

    def reset(self, *, seed: int = 0) -> str:
        rng = random.Random(f"counter:{seed}")
        self.counter, self.to_move, self.done = 0, self.seats[0], False
        self.invalid = {seat: 0 for seat in self.seats}
        self.secrets = {seat: f"{secret_tag(seat)}{rng.randrange(10**6)}" for seat in self.seats}
        return f"Race to {self.target}. counter=0. {self.to_move} to move"

    def step(self, action: str, seat: str = "") -> StepResult:
        if self.done:
            raise RuntimeError("step() after the game ended")
        if seat and seat != self.to_move:
            raise NotYourTurn(f"seat: {self.to_move} is to move, not {seat}")
        seat = self.to_move
        amount = _amount(action, self.max_add)
        if amount is None:
            return self._rejected(seat, action)
        self.counter += amount
        if self.counter >= self.target:
            others = [s for s in self.seats if s != seat]
            rewards = {seat: 1.0} | {s: -1.0 / len(others) for s in others}
            return self._end(seat, rewards, {seat: "win"} | {s: "loss" for s in others},
                             f"{seat} added {amount} and reached {self.counter}: {seat} wins")
        skip = amount == self.max_add
        position = self.seats.index(seat)
        self.to_move = self.seats[(position + (2 if skip else 1)) % len(self.seats)]
        summary = f"{seat} added {amount}: counter={self.counter}. {self.to_move} to move"
        info: dict[str, Any] = {"observations": self._views(summary)}
        if skip:
            info["to_move"] = self.to_move
        return StepResult(observation=summary, reward=0.0, done=False, info=info)

    def _rejected(self, seat: str, action: str) -> StepResult:
        self.invalid[seat] += 1
        if self.invalid[seat] > self.max_invalid_moves:
            others = [s for s in self.seats if s != seat]
            rewards = {seat: -1.0} | {s: 1.0 / len(others) for s in others}
            ended = self._end(seat, rewards, {seat: "forfeit"} | {s: "win" for s in others},
                              f"{seat} forfeits after {self.invalid[seat]} invalid moves")
            ended.info["error"] = "not a number in range"  # the forfeiting move was rejected too (as in gomoku)
            return ended
        text = f"[{seat}] rejected {action!r}: reply with 1..{self.max_add} ({self.secrets[seat]})"
        return StepResult(observation=text, reward=self.invalid_move_penalty, done=False,
                          info={"error": "not a number in range", "observations": {seat: text}})

    def _end(self, seat: str, rewards: dict[str, float], outcomes: dict[str, str], summary: str) -> StepResult:
        self.done = True
        return StepResult(observation=summary, reward=rewards[seat], done=True,
                          info={"observations": self._views(summary), "rewards": rewards, "outcomes": outcomes})

    def _views(self, summary: str) -> dict[str, str]:
        return {s: f"[{s}] {summary} ({self.secrets[s]})" for s in self.seats}


def _amount(action: str, max_add: int) -> int | None:
    text = action.strip()
    if not text.isdigit():
        return None
    value = int(text)
    return value if 1 <= value <= max_add else None


GAMES: dict[str, Callable[..., AbstractGame]] = {
    "gomoku": lambda **config: GomokuGame(**({"opponent": "none"} | config)),
    "counter": CounterRace,
    "math": MathGame,
}


class BrokenEnvironment(InProcessSeatedEnvironment):
    """Starts like its game, then every step fails as an unreachable EnvHost would."""

    async def step(self, action: str, seat: str) -> SeatedStep:
        raise EnvironmentBroke("EnvHost Step failed: UNAVAILABLE", traceback="Traceback: the game blew up")


class StepThenSlowAnswer(InProcessSeatedEnvironment):
    """Applies the move at once, then takes `answer_s` to answer: like an EnvHost whose Step
    was applied but whose response is still on the wire when the caller gives up."""

    answer_s = 0.2

    async def step(self, action: str, seat: str) -> SeatedStep:
        try:
            result = self.game.step(action, seat=seat)
        except NotYourTurn as error:
            raise EnvironmentBroke(f"the game refused the turn order: {error}") from error
        self.steps.append((seat, action))
        await asyncio.sleep(self.answer_s)
        return SeatedStep(observation=result.observation, reward=result.reward, done=result.done,
                          info=result.info)


def catalog_factory(delay: Callable[[], float] = lambda: 0.0, opened: list | None = None,
                    start_delay_s: float = 0.0):
    """A SeatedEnvironmentFactory for GAMES by env_name (config as constructor kwargs; the key
    "environment" picks a special environment class: "broken" or "slow_answer"); every
    environment made is appended to `opened`; `start_delay_s` slows every start."""
    def make(environment: MatchEnvironmentRef, job_id: str) -> InProcessSeatedEnvironment:
        config = dict(environment.config)
        kind = config.pop("environment", "")
        if environment.env_name not in GAMES:
            raise KeyError(environment.env_name)
        game = GAMES[environment.env_name](**_ints(config))
        cls = {"broken": BrokenEnvironment, "slow_answer": StepThenSlowAnswer}.get(kind, InProcessSeatedEnvironment)
        env = _SlowStart(cls, start_delay_s)(game, delay)
        if opened is not None:
            opened.append(env)
        return env
    return make


def _ints(config: Mapping[str, Any]) -> dict[str, Any]:
    """protobuf Structs carry every number as a float; integral ones become ints again."""
    return {key: int(value) if isinstance(value, float) and value.is_integer() else value
            for key, value in config.items()}


def _SlowStart(cls: type[InProcessSeatedEnvironment], start_delay_s: float) -> type[InProcessSeatedEnvironment]:
    if not start_delay_s:
        return cls

    class SlowStart(cls):  # type: ignore[misc, valid-type]
        async def start(self, reset_kwargs: Mapping[str, Any], seed: int) -> SeatedStart:
            await asyncio.sleep(start_delay_s)
            return await super().start(reset_kwargs, seed)

    return SlowStart
