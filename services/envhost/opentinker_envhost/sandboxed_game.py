"""One game in its own process, as the EnvHost sees it: a `GameHandle` over a socket.

Every call is one request frame and one reply frame (`sandbox_protocol`) on an asyncio stream,
bounded by the call timeout. What can go wrong, and what the session is told:

* the game raised: EnvironmentFailure with its traceback (GameConfigError: InvalidArgument,
  NotYourTurn: NotYourTurnError), as in thread mode; the process lives on;
* past the call timeout, or the caller gave up (cancelled): the process is killed at once,
  EnvironmentTimeout / CancelledError;
* the process died (memory or CPU-time limit, a signal, os._exit): EnvironmentCrashed saying
  how, from the wait status the fork server reports, with the last thing the game printed;
* it broke the protocol (a frame over the size limit, bytes that are not a valid reply): the
  process is killed, EnvironmentCrashed.

After a crash or a kill the handle only accepts `discard`/`close`, which wait until the fork
server has reaped the process.

A game given a `release` function is in a warm process (`sandbox_pool`): its close asks the
process to stay, and when the process answers that it may be reused (and no call of this
session failed) it goes back to the pool through `release` instead of exiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from opentinker_env import StepResult
from opentinker_envhost import sandbox_protocol as wire
from opentinker_envhost.catalog import GameSpec
from opentinker_envhost.errors import EnvironmentCrashed, EnvironmentTimeout
from opentinker_envhost.game_replies import invalid_reply, invalid_result, reply_error
from opentinker_envhost.sandbox_connection import GameProcess
from opentinker_envhost.game_results import (
    ResetOutcome,
    reset_outcome_from_wire,
    step_request,
    step_result_from_wire,
)
from opentinker_envhost.limits import SessionLimits

EXIT_WAIT_S = 5.0
"""How long a dead or killed process may take to be reported reaped."""
CLOSE_EXIT_WAIT_S = 1.0
"""How long a process may take to exit after answering close() before it is killed."""
KEPT = "kept for another session"


class SandboxedGame:
    """A game constructed in its own process."""

    def __init__(self, process: GameProcess, *, limits: SessionLimits, kill: Callable[[int], None],
                 release: Callable[[GameProcess], None] | None = None) -> None:
        self.process = process
        self.pid = process.pid
        self.exited = process.exited
        self.limits = limits
        self.kill_pid = kill
        self.release = release
        self.raised = False
        """A call of this session failed: its process is not kept."""
        self.ended = ""
        """Why the process is gone or going, or KEPT (empty while it serves)."""

    @classmethod
    async def open(cls, process: GameProcess, spec: GameSpec, config: dict[str, Any], *, session_id: str,
                   limits: SessionLimits, kill: Callable[[int], None],
                   release: Callable[[GameProcess], None] | None = None) -> SandboxedGame:
        """Construct the game in `process` (`spec.cls(**config)`) for session `session_id`."""
        process.output.next_session(session_id)
        game = cls(process, limits=limits, kill=kill, release=release)
        try:
            await game.call({"call": "construct", "config": config}, f"{spec.cls.__name__}()", invalid=True)
        except BaseException:
            await asyncio.shield(game.discard())
            raise
        return game

    async def reset(self, arguments: dict[str, Any], what: str) -> ResetOutcome:
        result = await self.call({"call": "reset", "arguments": arguments}, what, invalid=True)
        return self._checked(what, lambda: reset_outcome_from_wire(result, self.limits.max_observation_chars))

    async def step(self, action: str, seat_kwargs: dict[str, str], what: str, *,
                   truncated: bool = False) -> StepResult:
        result = await self.call(step_request(action, seat_kwargs, truncated), what)
        return self._checked(what, lambda: step_result_from_wire(result, self.limits.max_observation_chars))

    async def close(self) -> None:
        """The game's close(); then the process goes back to the pool if it may, else exits
        (killed if it does not within a second)."""
        keep = self.release is not None and not self.raised
        try:
            if not self.ended:
                result = await self.call({"call": "close", "keep": True} if keep else {"call": "close"},
                                         "close()")
                if keep and result == {"reusable": True} and not self.raised:
                    self._keep()
                    return
                self.ended = "closed"
        finally:
            if self.ended != KEPT:
                await asyncio.shield(self._reap(CLOSE_EXIT_WAIT_S))

    async def discard(self) -> None:
        self._kill("discarded")
        await self._reap(EXIT_WAIT_S)

    async def call(self, request: dict[str, Any], what: str, *, invalid: bool = False) -> Any:
        """Send one request and return the reply's result; the domain error otherwise."""
        if self.ended:
            raise EnvironmentCrashed(f"{what}: the game's process {self.ended}")
        deadline = asyncio.get_running_loop().time() + self.limits.call_timeout_s
        try:
            reply = wire.decode(await self.process.connection.exchange(wire.encode(request), deadline))
        except TimeoutError:
            self._kill(f"was killed: {what} ran past {self.limits.call_timeout_s:g}s")
            raise EnvironmentTimeout(f"{what} did not return within {self.limits.call_timeout_s:g}s; "
                                     "its process was killed") from None
        except asyncio.CancelledError:
            self._kill(f"was killed: {what} was cancelled")
            raise
        except wire.ProtocolError as error:
            self._kill(f"{error}; it was killed")
            raise await self._crash(what, self.ended) from None
        except ConnectionError:
            raise await self._crash(what) from None
        return self._result(reply, what, invalid=invalid)

    def _result(self, reply: Any, what: str, *, invalid: bool) -> Any:
        if isinstance(reply, dict) and "ok" in reply:
            return reply["ok"]
        self.raised = True
        failure = reply_error(reply, what, invalid=invalid)
        if failure is None:
            self._kill("sent an invalid reply; it was killed")
            raise invalid_reply(what, reply)
        raise failure

    def _checked(self, what: str, convert: Callable[[], Any]) -> Any:
        """The EnvHost's own check of a reply the process's checks should have refused."""
        try:
            return convert()
        except (TypeError, ValueError) as error:
            self.raised = True
            self._kill("sent an invalid result; it was killed")
            raise invalid_result(what, error) from None

    def _keep(self) -> None:
        self.ended = KEPT
        self.process.output.end_session()
        self.release(self.process)  # type: ignore[misc]

    async def _crash(self, what: str, reason: str = "") -> EnvironmentCrashed:
        """The error for a process that died (or was killed for `reason`), once it is reaped."""
        self.raised = True
        status = await self._wait_exit(EXIT_WAIT_S)
        described, kind = wire.describe_exit(status, memory_limit_mb=self.limits.memory_limit_mb,
                                             cpu_seconds=self.limits.cpu_seconds_per_call)
        self.ended = reason or described
        tail = self.process.output.tail_text()
        return EnvironmentCrashed(f"{what} failed: the game's process {self.ended}", metric_kind=kind,
                                  traceback=f"last output of the game's process:\n{tail}" if tail else "")

    def _kill(self, reason: str) -> None:
        self.raised = True
        if not self.exited.done():
            self.kill_pid(self.pid)
        self.ended = self.ended or reason

    async def _wait_exit(self, grace: float) -> int | None:
        """The wait status once reaped; killed after `grace`; None if never reported."""
        try:
            return await asyncio.wait_for(asyncio.shield(self.exited), grace)
        except TimeoutError:
            self._kill("did not exit; it was killed")
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(self.exited), EXIT_WAIT_S)
        return None

    async def _reap(self, grace: float) -> None:
        """Wait until the process is reaped (killing it after `grace`), then close our ends."""
        await self._wait_exit(grace)
        self.ended = self.ended or "exited"
        self.process.close_ends()
