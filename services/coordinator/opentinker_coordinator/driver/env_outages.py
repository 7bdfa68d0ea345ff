"""Riding out an environment outage: a batch of episodes collected again until it is usable.

A batch is unusable when every episode failed (nothing to train on, no score to report) or, for an
evaluation, when any episode failed because its environment host could not be reached (the score
would count the outage as the policy's). Why the episodes failed decides how long to insist:

- an **outage** (some episode found its EnvHost unreachable: down, restarting, cut off) is waited
  out within `OutageBudget.seconds`, with growing pauses, each told to the job's events
  ("environment unavailable, retrying in 2 s (280 s of the outage budget left)");
- a **broken game** (its episodes fail by raising or answering garbage while the EnvHost is up)
  is tried `broken_game_tries` times and then given up: waiting would not mend it.

No optimizer step is taken, skipped or repeated while a batch is collected again: the driver
waits at the same step. Every collection's failed episodes go to the job's `EnvErrorDigest`
(env_errors.py: the first of each distinct error is told with the game's traceback), and a batch
given up names its cause: the first error, with its kind. An evaluation that stays unusable is
an error like a training batch (`evaluate_or_fail`), never a score and never skipped in silence.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from opentinker_coordinator.driver.env_errors import EnvErrorDigest, first_error
from opentinker_coordinator.types import Trajectory

T = TypeVar("T")
Collect = Callable[[], Awaitable[list[Trajectory]]]
Tell = Callable[[str, str], Awaitable[None]]
"""tell(level, message): a line in the job's events."""
Pause = Callable[[float], Awaitable[None]]
"""Sleeps, or raises when the run is stopped meanwhile."""


@dataclass(frozen=True, kw_only=True)
class OutageBudget:
    seconds: float = 300.0
    """How long one batch waits for an unreachable environment before the job gives up."""
    initial_delay: float = 1.0
    max_delay: float = 5.0
    """Pauses between collections grow from `initial_delay` to this (the lag after a return)."""
    broken_game_tries: int = 3
    """Collections of a batch whose episodes all failed with the environment up (a broken game)."""
    broken_game_delay: float = 2.0
    """Pause before the n-th collection again of such a batch: n x this."""

    def delay(self, retry: int) -> float:
        return min(self.max_delay, self.initial_delay * 2 ** retry) * random.uniform(0.9, 1.1)


class EnvironmentUnavailable(Exception):
    """A batch's environment stayed unreachable for the whole outage budget."""


class EnvironmentBroken(Exception):
    """Every episode of a batch failed, again and again, with its environment reachable."""


@dataclass(frozen=True)
class Collected:
    trajectories: list[Trajectory]
    failed_before: int
    """Failed episodes of the collections thrown away before this one."""
    retries: int


def unreachable(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    return [t for t in trajectories if t.failed and t.env_unreachable]


def trainable(trajectories: Sequence[Trajectory]) -> bool:
    """Some episode sampled tokens and did not fail."""
    return any(not t.failed and t.sampled_tokens > 0 for t in trajectories)


def scorable(trajectories: Sequence[Trajectory]) -> bool:
    """An evaluation's score means something: some episode finished, none lost to an outage."""
    return any(not t.failed for t in trajectories) and not unreachable(trajectories)


async def collect_until_usable(collect: Collect, *, usable: Callable[[list[Trajectory]], bool], what: str,
                               budget: OutageBudget, tell: Tell, pause: Pause, digest: EnvErrorDigest) -> Collected:
    """`await collect()` until `usable(trajectories)`; raises EnvironmentUnavailable once an outage
    outlasts the budget, EnvironmentBroken after `budget.broken_game_tries` broken batches (either
    names the cause, after the digest's summary is told). `what` names the batch in events
    ("step 3", "the evaluation at step 4")."""
    started, retries, failed_before, broken = time.monotonic(), 0, 0, 0
    while True:
        trajectories = await collect()
        await digest.note(trajectories, what=what)
        if usable(trajectories):
            if retries:
                await tell("info", f"{what}: environment back; collected after {retries} "
                                   f"{'retry' if retries == 1 else 'retries'} ({time.monotonic() - started:.0f} s)")
            return Collected(trajectories, failed_before, retries)
        failed = [t for t in trajectories if t.failed]
        failed_before += len(failed)
        lost = unreachable(trajectories)
        summary = f"{len(failed)} of {len(trajectories)} episodes failed"
        if lost:
            left = budget.seconds - (time.monotonic() - started)
            if left <= 0:
                await digest.tell_summary()
                raise EnvironmentUnavailable(
                    f"{what}: the environment stayed unavailable for {budget.seconds:g} s (the Coordinator's "
                    f"env_outage_seconds), {summary}. Cause: {digest.cause(lost)}")
            delay = min(budget.delay(retries), left)
            await tell("warning", f"{what}: environment unavailable ({summary}: {first_error(lost).message}); "
                                  f"retrying in {delay:.1f} s ({left:.0f} s of the outage budget left)")
        else:
            broken += 1
            if broken >= budget.broken_game_tries:
                await digest.tell_summary()
                raise EnvironmentBroken(f"{what}: no usable episode with the environment up, {broken} times "
                                        f"({summary}); giving up. Cause: {digest.cause(failed)}")
            delay = budget.broken_game_delay * broken
            await tell("warning", f"{what}: no usable episode ({summary}: {first_error(failed).describe()}); "
                                  f"collecting them again ({broken + 1}/{budget.broken_game_tries})")
        await pause(delay)
        retries += 1


async def evaluate_or_fail(collect: Collect, *, what: str, budget: OutageBudget, tell: Tell, pause: Pause,
                           digest: EnvErrorDigest) -> list[Trajectory]:
    """An evaluation's episodes, collected again through an outage and a few times when all
    failed; EnvironmentUnavailable or EnvironmentBroken (naming the cause) when they stay
    unusable: an evaluation whose episodes all failed is an error, never a score (of 0 or none)."""
    return (await collect_until_usable(collect, usable=scorable, what=what, budget=budget, tell=tell,
                                       pause=pause, digest=digest)).trajectories


async def retry_while_unreachable(attempt: Callable[[], Awaitable[T]], *, unreachable: Callable[[Exception], bool],
                                  what: str, budget: OutageBudget, tell: Tell, pause: Pause) -> T:
    """`await attempt()`, again while it raises an error that `unreachable` says is an outage,
    within the outage budget (then EnvironmentUnavailable); any other error is raised at once."""
    started, retries = time.monotonic(), 0
    while True:
        try:
            result = await attempt()
        except Exception as error:
            if not unreachable(error):
                raise
            left = budget.seconds - (time.monotonic() - started)
            if left <= 0:
                raise EnvironmentUnavailable(f"{what}: the environment stayed unavailable for {budget.seconds:g} s "
                                             f"(the Coordinator's env_outage_seconds); last error: {error}") from error
            delay = min(budget.delay(retries), left)
            await tell("warning", f"{what}: environment unavailable ({error}); retrying in {delay:.1f} s "
                                  f"({left:.0f} s of the outage budget left)")
            await pause(delay)
            retries += 1
            continue
        if retries:
            await tell("info", f"{what}: environment back after {retries} "
                               f"{'retry' if retries == 1 else 'retries'} ({time.monotonic() - started:.0f} s)")
        return result
