"""The environment as the agent loop sees it: one session per episode (domain Protocol).

`envhost_client` implements it over the EnvHost (a single-agent game) and
`match_client.MatchSession` over a Coordinator match (one seat of a multi-agent game); tests
implement it in-process. An action cut off by a token limit is stepped with `truncated=True`
(the EnvHost then asks the game's `on_truncated`); a session may set
`accepts_truncated_actions = True` to be stepped with cut actions even when the job's limits say
END_EPISODE (a match: leaving would forfeit it). See fsm.py.
Any failure of the environment (it raised, its host is unreachable, it answered garbage) is
raised as `EnvironmentFailure`, which ends the episode with STOP_REASON_ENV_ERROR.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentinker_rollout.episode import Episode


TRACEBACK_TAIL_LINES = 20
TRACEBACK_TAIL_CHARS = 4096
"""How much of a game's traceback an episode's `env_error` carries: its last lines (where it raised)."""


class EnvironmentFailure(Exception):
    """The environment could not open, reset or step; `traceback` is the game's, if any, and
    `status` the status code's name when its host answered with one (e.g. "RESOURCE_EXHAUSTED")."""

    def __init__(self, message: str, *, traceback: str = "", status: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback
        self.status = status


def with_traceback_tail(summary: str, traceback: str) -> str:
    """An environment failure as an episode's `env_error` tells it: `summary` on one line, then
    (when the game raised) the tail of its traceback, so whoever reads the trajectory (the
    Coordinator, for the job's events) sees where the game failed."""
    line = " ".join(summary.split("\n")).replace("\r", " ")
    tail = traceback_tail(traceback)
    return f"{line}\n{tail}" if tail else line


def traceback_tail(traceback: str) -> str:
    """The last TRACEBACK_TAIL_LINES lines of `traceback`, at most TRACEBACK_TAIL_CHARS
    characters, after a line saying what was cut ("" for no traceback)."""
    lines = traceback.strip("\n").splitlines()
    kept = lines[-TRACEBACK_TAIL_LINES:]
    while len(kept) > 1 and sum(len(line) + 1 for line in kept) > TRACEBACK_TAIL_CHARS:
        kept = kept[1:]
    text = "\n".join(kept)[-TRACEBACK_TAIL_CHARS:]
    if len(kept) == len(lines) and len(text) == len("\n".join(lines)):
        return text
    return f"[the traceback's last {len(kept)} of {len(lines)} lines, at most {TRACEBACK_TAIL_CHARS} characters]\n{text}"


@dataclass(frozen=True, kw_only=True)
class ResetResult:
    """What a reset returned: the texts of the opening messages.

    `done` is set when the episode is over before its first action (a match that finished
    before this seat's first turn, e.g. the opponent left); `reward` is what the episode got
    before acting (counted in the trajectory's total reward).
    """

    system_prompt: str = ""
    initial_user_message: str = ""
    observation: str = ""
    info: Mapping[str, Any] = field(default_factory=dict)
    done: bool = False
    reward: float = 0.0


@dataclass(frozen=True, kw_only=True)
class StepOutcome:
    """What a step returned."""

    observation: str = ""
    reward: float = 0.0
    done: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)


class EnvironmentSession(Protocol):
    """One environment session, used by one episode from open to close."""

    async def open(self) -> None:
        """Create the session (raises EnvironmentFailure)."""

    async def reset(self, kwargs: Mapping[str, Any], seed: int) -> ResetResult:
        """Start the episode."""

    async def step(self, action: str, *, truncated: bool = False) -> StepOutcome:
        """Apply the model's action text; `truncated`: a token limit cut it off (the game's
        `on_truncated` judges it). Only cut actions are stepped with the keyword."""

    async def close(self) -> None:
        """Release the session; never raises."""


EnvironmentFactory = Callable[[Episode], EnvironmentSession]
"""Makes an unopened session for one episode (which game or match it plays may depend on the
episode: a match episode names its match and seat). A factory with an `async aclose()` is told
when the call's episodes are all done (`envhost_client.EnvHostEnvironments` then closes the
sessions it kept for reuse, unless they belong to a job)."""


class TimedEnvironment:
    """Wraps a session and sums the seconds its open, reset and close took (`overhead_s`: what
    the environment costs an episode besides its steps). Other attributes pass through."""

    def __init__(self, session: EnvironmentSession) -> None:
        self.session = session
        self.overhead_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    async def open(self) -> None:
        await self._timed(self.session.open())

    async def reset(self, kwargs: Mapping[str, Any], seed: int) -> ResetResult:
        return await self._timed(self.session.reset(kwargs, seed))

    async def step(self, action: str, *, truncated: bool = False) -> StepOutcome:
        if truncated:
            return await self.session.step(action, truncated=True)
        return await self.session.step(action)

    async def close(self) -> None:
        await self._timed(self.session.close())

    async def _timed(self, call: Awaitable[Any]) -> Any:
        started = time.perf_counter()
        try:
            return await call
        finally:
            self.overhead_s += time.perf_counter() - started
