"""The environment as the agent loop sees it: one session per episode (domain Protocol).

`envhost_client.EnvHostSession` implements it over gRPC; tests implement it in-process.
Any failure of the environment (it raised, its host is unreachable, it answered garbage) is
raised as `EnvironmentFailure`, which ends the episode with STOP_REASON_ENV_ERROR.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class EnvironmentFailure(Exception):
    """The environment could not open, reset or step; `traceback` is the game's, if any."""

    def __init__(self, message: str, *, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback


@dataclass(frozen=True, kw_only=True)
class ResetResult:
    """What a reset returned: the texts of the opening messages."""

    system_prompt: str = ""
    initial_user_message: str = ""
    observation: str = ""
    info: Mapping[str, Any] = field(default_factory=dict)


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

    async def step(self, action: str) -> StepOutcome:
        """Apply the model's action text."""

    async def close(self) -> None:
        """Release the session; never raises."""


EnvironmentFactory = Callable[[], EnvironmentSession]
"""Makes a fresh, unopened session for one episode."""
