"""A multi-agent game as a match sees it: one environment session, stepped seat by seat.

`envhost_seats.EnvHostSeatedEnvironment` implements it over the EnvHost; tests implement it
in-process. Any failure of the game or its host raises `EnvironmentBroke`.

Contract of a seated game's step `info` (all optional; see `opentinker_env.game`):
- "to_move": the seat to move next (default: the next seat in turn order after an accepted
  action, the same seat after a rejected one);
- "error": present when the game rejected the action (the seat moves again);
- "observations": {seat: text}, each seat's private view of this step (default: the step's
  observation is public);
- "rewards": {seat: reward} for this step (default: the step's reward, to the acting seat);
  on the final step these are the match's final rewards;
- "outcomes": {seat: "win" | "loss" | "draw" | ...} on the final step (default: the sign of
  each seat's final reward).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class EnvironmentBroke(Exception):
    """The game raised, hung or its host is unreachable; `traceback` is the game's, if any;
    `unreachable` when the host did not answer (down, restarting: worth waiting for);
    `host_code`/`host_details` what a remote host answered (a status code name; "" when the
    failure is not a host's answer)."""

    def __init__(self, message: str, *, traceback: str = "", unreachable: bool = False, host_code: str = "",
                 host_details: str = "") -> None:
        super().__init__(message)
        self.traceback, self.unreachable = traceback, unreachable
        self.host_code, self.host_details = host_code, host_details


@dataclass(frozen=True, kw_only=True)
class SeatedStart:
    """What opening and resetting the game returned."""

    seats: tuple[str, ...]
    """The game's seats in turn order; the first moves first."""
    system_prompt: str = ""
    initial_user_message: str = ""
    observation: str = ""


@dataclass(frozen=True, kw_only=True)
class SeatedStep:
    observation: str = ""
    reward: float = 0.0
    done: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)


class SeatedEnvironment(Protocol):
    async def start(self, reset_kwargs: Mapping[str, Any], seed: int) -> SeatedStart:
        """Open a session of the game and reset it."""

    async def step(self, action: str, seat: str) -> SeatedStep:
        """Apply `seat`'s action."""

    async def close(self) -> None:
        """Release the session; never raises."""


@dataclass(frozen=True, kw_only=True)
class MatchEnvironmentRef:
    """Which game a match plays (domain twin of common.v1.EnvironmentReference)."""

    env_name: str
    config: Mapping[str, Any] = field(default_factory=dict)
    envhost_address: str = ""
    """Empty = the Coordinator's default EnvHost."""


SeatedEnvironmentFactory = Callable[[MatchEnvironmentRef, str], SeatedEnvironment]
"""Makes an unopened environment for (game, job_id)."""
