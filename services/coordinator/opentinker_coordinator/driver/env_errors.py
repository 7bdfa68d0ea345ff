"""Environment failures as the job's events tell them: the first of each distinct error, once.

The Rollout words an episode's environment failure (`Trajectory.env_error`) as one line, e.g.
"EnvHost 10.0.0.7:50054 Step failed: INTERNAL: Reverse.step() raised KeyError: 'x'" (or its own
"the environment did not answer within the episode's time limit ..."), followed, when the game
raised, by the tail of the game's traceback (its last 20 lines, at most 4 KB; a first line in
brackets says so when it was cut). `EnvError.of` reads that text: its kind (unknown environment,
EnvHost unreachable, the game raised in reset/step, timeout, crashed, memory or CPU-time limit,
...), its one-line message and its traceback.

`EnvErrorDigest` is one job's record of them: the first error of each kind and normalised message
(numbers and ids masked, so "guess 37" and "guess 12" are one error) becomes one log line of the
job (source "environment", with the traceback), later repeats are only counted, and `summary()`
tells the counts in one bounded line. `cause(failed)` names what made a batch unusable, for the
message a failing job ends with.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from opentinker_coordinator.types import Trajectory

Tell = Callable[[str, str], Awaitable[None]]
"""tell(level, message): a line of the job's events (source "environment")."""
JobLog = Callable[..., Awaitable[None]]
"""A reporter's `log(level, message, *, source)`."""
SOURCE = "environment"
"""The source of the job's log lines about its environment."""

MAX_DISTINCT_TOLD = 20
"""Distinct errors told with their traceback per job; later new ones are only counted."""
MAX_SUMMARY_ENTRIES = 8
MAX_MESSAGE_CHARS = 500
"""The one-line message of an error, as events and the job's status tell it."""


class EnvErrorKind(StrEnum):
    """What kind of environment failure an episode ended with (the words are the events')."""

    UNKNOWN_ENVIRONMENT = "unknown environment"
    ENVHOST_UNREACHABLE = "EnvHost unreachable"
    GAME_RAISED = "the game raised"
    TIMEOUT = "timeout"
    CRASHED = "the game's process crashed"
    MEMORY_LIMIT = "memory limit"
    CPU_LIMIT = "CPU-time limit"
    INVALID_INPUT = "invalid config or arguments"
    ENVHOST_FULL = "EnvHost at capacity"
    NOT_ALLOWED = "not allowed"
    OTHER = "environment error"


CALLS = {"OpenSession": "open", "Reset": "reset", "Step": "step", "CloseSession": "close"}
"""EnvHost methods as the game's calls they carry."""
ENVHOST_FAILURE = re.compile(r"^EnvHost (?P<address>\S*) (?P<method>\w+) failed: (?P<status>[A-Z_]+): (?P<details>.*)$")
EPISODE_TIME_LIMIT = "the environment did not answer within the episode's time limit"
MASKED = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-fA-F]{8,}\b|\d+(?:\.\d+)?")
LEVELS = {EnvErrorKind.ENVHOST_UNREACHABLE: "warning", EnvErrorKind.TIMEOUT: "warning",
          EnvErrorKind.ENVHOST_FULL: "warning", EnvErrorKind.OTHER: "warning"}
"""Kinds that may pass (an outage, a slow or busy EnvHost) are warnings; the others errors."""


@dataclass(frozen=True, kw_only=True)
class EnvError:
    kind: EnvErrorKind
    call: str
    """The game's call that failed (open, reset, step, close), "" when not known."""
    message: str
    """The failure on one line (at most MAX_MESSAGE_CHARS characters)."""
    traceback: str = ""

    @classmethod
    def of(cls, text: str) -> EnvError:
        first, _, rest = text.strip().partition("\n")
        message = _clipped(first.strip() or "no error text")
        match = ENVHOST_FAILURE.match(first.strip())
        if match is None:
            kind = EnvErrorKind.TIMEOUT if first.startswith(EPISODE_TIME_LIMIT) else EnvErrorKind.OTHER
            return cls(kind=kind, call="", message=message, traceback=rest.strip("\n"))
        return cls(kind=_kind(match["status"], match["details"]), call=CALLS.get(match["method"], ""),
                   message=message, traceback=rest.strip("\n"))

    @property
    def label(self) -> str:
        """The kind in words, with the call where it says more ("the game raised in step")."""
        if self.call and self.kind in (EnvErrorKind.GAME_RAISED, EnvErrorKind.TIMEOUT, EnvErrorKind.CRASHED,
                                       EnvErrorKind.MEMORY_LIMIT, EnvErrorKind.CPU_LIMIT):
            return f"{self.kind} in {self.call}"
        return str(self.kind)

    @property
    def key(self) -> tuple[str, str]:
        """What makes two errors the same: kind and call, and the message with numbers and ids masked."""
        return self.label, MASKED.sub("#", self.message)

    def describe(self) -> str:
        """"<label>: <message>", one line."""
        return f"{self.label}: {self.message}"


def _kind(status: str, details: str) -> EnvErrorKind:
    if status == "UNAVAILABLE":
        return EnvErrorKind.ENVHOST_UNREACHABLE
    if status == "NOT_FOUND" and "no environment named" in details:
        return EnvErrorKind.UNKNOWN_ENVIRONMENT
    if status == "DEADLINE_EXCEEDED":
        return EnvErrorKind.TIMEOUT
    if status in ("INTERNAL", "UNKNOWN"):
        return _internal_kind(details)
    if status in ("INVALID_ARGUMENT", "FAILED_PRECONDITION"):
        return EnvErrorKind.INVALID_INPUT
    if status == "RESOURCE_EXHAUSTED":
        return EnvErrorKind.ENVHOST_FULL
    if status in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
        return EnvErrorKind.NOT_ALLOWED
    return EnvErrorKind.OTHER


def _internal_kind(details: str) -> EnvErrorKind:
    """A game's failure as the EnvHost words it (opentinker_envhost: game_calls, sandboxed_game)."""
    if "the game's process exceeded its memory limit" in details:
        return EnvErrorKind.MEMORY_LIMIT
    if "the game's process exceeded its CPU-time limit" in details:
        return EnvErrorKind.CPU_LIMIT
    if "the game's process" in details:
        return EnvErrorKind.CRASHED
    if " raised " in details:
        return EnvErrorKind.GAME_RAISED
    return EnvErrorKind.OTHER


def _clipped(line: str) -> str:
    return line if len(line) <= MAX_MESSAGE_CHARS else line[:MAX_MESSAGE_CHARS - 3] + "..."


def first_error(failed: Sequence[Trajectory]) -> EnvError:
    """The first failed episode's error (in the order they finished)."""
    return EnvError.of(next((t.env_error for t in failed if t.env_error), ""))


@dataclass
class _Seen:
    error: EnvError
    count: int = 0


@dataclass
class EnvErrorDigest:
    """One job's environment errors: each distinct one told once, all of them counted."""

    tell: Tell
    max_told: int = MAX_DISTINCT_TOLD
    seen: dict[tuple[str, str], _Seen] = field(default_factory=dict)
    untold: int = 0
    """Distinct errors past `max_told` (counted, never told)."""

    async def note(self, trajectories: Sequence[Trajectory], *, what: str) -> None:
        """Count the failed episodes of a batch (`what`: "step 3", "the evaluation at step 4");
        a log line for each error not seen before in this job."""
        for trajectory in trajectories:
            if not trajectory.failed:
                continue
            error = EnvError.of(trajectory.env_error)
            if (seen := self.seen.get(error.key)) is not None:
                seen.count += 1
            elif len(self.seen) < self.max_told:
                self.seen[error.key] = _Seen(error, 1)
                await self.tell(LEVELS.get(error.kind, "error"), self._first_line(error, what))
            else:
                self.untold += 1

    def _first_line(self, error: EnvError, what: str) -> str:
        text = (f"{what}: an episode failed: {error.describe()} (the first such error of this job; "
                "later ones are counted, see the summary)")
        return f"{text}\n{error.traceback}" if error.traceback else text

    def cause(self, failed: Sequence[Trajectory]) -> str:
        """What made a batch unusable: its first error's kind and message, and where to find the
        traceback (the line `note` told)."""
        error = first_error(failed)
        where = "; the game's traceback is in the job's log (opentinker logs JOB)" if error.traceback else ""
        return f"{error.describe()}{where}"

    def summary(self) -> str:
        """The errors counted so far, most frequent first, in one line ("" for none)."""
        if not self.seen:
            return ""
        ranked = sorted(self.seen.values(), key=lambda seen: -seen.count)
        parts = [f"{seen.count} x {seen.error.describe()}" for seen in ranked[:MAX_SUMMARY_ENTRIES]]
        others = sum(seen.count for seen in ranked[MAX_SUMMARY_ENTRIES:]) + self.untold
        total = sum(seen.count for seen in ranked) + self.untold
        tail = f"; {others} x other errors" if others else ""
        return f"environment errors in this job, {total} episodes in all: " + "; ".join(parts) + tail

    async def tell_summary(self) -> None:
        if text := self.summary():
            await self.tell("warning", text)


def job_digest(log: JobLog) -> EnvErrorDigest:
    """A digest for one job, telling its lines through the reporter's `log` (source "environment")."""
    async def tell(level: str, message: str) -> None:
        await log(level, message, source=SOURCE)
    return EnvErrorDigest(tell=tell)
