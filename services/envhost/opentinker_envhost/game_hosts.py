"""Where a session's game lives: behind one interface for both isolation modes.

`GameHandle` is one constructed game; `GameHost` builds them. `ThreadHost` keeps the game in
the EnvHost process (sync methods on daemon worker threads, async ones on the event loop):
for trusted built-in games and benchmarks. `sandbox.Sandbox` gives each game its own process
with CPU-time and memory limits (the default). Both raise the same domain errors: InvalidArgument
(GameConfigError from the constructor or reset), NotYourTurnError, EnvironmentFailure (the game
raised or returned something invalid), EnvironmentCrashed (its process died; sandbox only) and
EnvironmentTimeout (past the call timeout; a sandboxed game's process is killed).
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

import structlog

from opentinker_env import Game, GameConfigError, StepResult
from opentinker_envhost.catalog import GameCatalog, GameSpec
from opentinker_envhost.game_calls import call_game
from opentinker_envhost.game_results import ResetOutcome, reset_call, step_call
from opentinker_envhost.limits import Isolation, SessionLimits
from opentinker_envhost.sandbox import Sandbox

log = structlog.get_logger(__name__)


class GameHandle(Protocol):
    """One constructed game. `what` names the call in messages ("MathGame.step()")."""

    async def reset(self, arguments: dict[str, Any], what: str) -> ResetOutcome: ...

    async def step(self, action: str, seat_kwargs: dict[str, str], what: str, *,
                   truncated: bool = False) -> StepResult: ...

    async def close(self) -> None:
        """Run the game's close(); its process (if any) is gone afterwards, even if it raised."""

    async def discard(self) -> None:
        """Drop a broken game without calling it (a sandboxed one's process is killed)."""


class GameHost(Protocol):
    async def start(self) -> None:
        """Get ready to open games (start a fork server); idempotent."""

    async def open(self, spec: GameSpec, config: dict[str, Any], session_id: str,
                   owner: tuple[str, ...] = ()) -> GameHandle:
        """`spec.cls(**config)`, bounded by the call timeout. `owner` (tenant, job, attempt; ()
        for none) says whose earlier sessions' processes the game may be built in."""

    def reap_idle(self) -> int:
        """End what is kept for later sessions and idle too long; how many."""

    async def shutdown(self) -> None:
        """Stop whatever `start` started; games still open are killed."""


class InThreadGame:
    """A game object in this process."""

    def __init__(self, game: Game, spec: GameSpec, limits: SessionLimits) -> None:
        self.game = game
        self.in_thread = not spec.is_async
        self.limits = limits

    async def reset(self, arguments: dict[str, Any], what: str) -> ResetOutcome:
        call = reset_call(self.game, arguments, is_async=not self.in_thread,
                          max_chars=self.limits.max_observation_chars)
        return await self._call(call, what, invalid=(GameConfigError,))

    async def step(self, action: str, seat_kwargs: dict[str, str], what: str, *,
                   truncated: bool = False) -> StepResult:
        call = step_call(self.game, action, seat_kwargs, is_async=not self.in_thread,
                         max_chars=self.limits.max_observation_chars, truncated=truncated)
        return await self._call(call, what)

    async def close(self) -> None:
        await self._call(self.game.close, "close()")

    async def discard(self) -> None:
        """Nothing to do: a thread cannot be killed (a stuck one keeps only itself)."""

    async def _call(self, fn: Any, what: str, invalid: tuple[type[Exception], ...] = ()) -> Any:
        return await call_game(fn, in_thread=self.in_thread, timeout=self.limits.call_timeout_s,
                               what=what, invalid=invalid)


class ThreadHost:
    """Games in the EnvHost's own process (isolation = thread)."""

    def __init__(self, limits: SessionLimits) -> None:
        self.limits = limits

    async def start(self) -> None:
        return None

    async def open(self, spec: GameSpec, config: dict[str, Any], session_id: str,
                   owner: tuple[str, ...] = ()) -> GameHandle:
        game = await call_game(lambda: spec.cls(**config), in_thread=not spec.is_async,
                               timeout=self.limits.call_timeout_s, what=f"{spec.cls.__name__}()",
                               invalid=(GameConfigError,))
        return InThreadGame(game, spec, self.limits)

    def reap_idle(self) -> int:
        return 0

    async def shutdown(self) -> None:
        return None


def game_host(catalog: GameCatalog, limits: SessionLimits, *, platform: str = sys.platform) -> GameHost:
    """The host for `limits.isolation`. The sandbox needs Linux (SOCK_SEQPACKET, PR_SET_PDEATHSIG,
    rlimits that hold); elsewhere (a laptop's `opentinker envhost`) games run in threads, and a
    warning says so."""
    if Isolation(limits.isolation) is Isolation.THREAD:
        return ThreadHost(limits)
    if not platform.startswith("linux"):
        log.warning("sandbox_unavailable", platform=platform,
                    detail="process isolation needs Linux; games run in the EnvHost's threads")
        return ThreadHost(limits)
    return Sandbox(catalog, limits)
