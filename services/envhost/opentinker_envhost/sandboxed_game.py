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
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentinker.env import StepResult
from opentinker_envhost import sandbox_protocol as wire
from opentinker_envhost.catalog import GameSpec
from opentinker_envhost.errors import (
    EnvironmentCrashed,
    EnvironmentFailure,
    EnvironmentTimeout,
    InvalidArgument,
    NotYourTurnError,
)
from opentinker_envhost.game_output import GameOutput
from opentinker_envhost.game_results import ResetOutcome, reset_outcome_from_wire, step_result_from_wire
from opentinker_envhost.limits import SessionLimits

EXIT_WAIT_S = 5.0
"""How long a dead or killed process may take to be reported reaped."""
CLOSE_EXIT_WAIT_S = 1.0
"""How long a process may take to exit after answering close() before it is killed."""


@dataclass(frozen=True, kw_only=True)
class Spawned:
    """A fresh game process: its pid, our end of its session socket, its output pipe, and the
    future of its wait status (None: unknown, the fork server is gone)."""

    pid: int
    sock: socket.socket
    output_fd: int
    exited: asyncio.Future[int | None]


class SandboxedGame:
    """A game constructed in its own process."""

    def __init__(self, spawned: Spawned, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 output: GameOutput, limits: SessionLimits, frame_limit: int,
                 kill: Callable[[int], None]) -> None:
        self.pid = spawned.pid
        self.exited = spawned.exited
        self.reader = reader
        self.writer = writer
        self.output = output
        self.limits = limits
        self.frame_limit = frame_limit
        self.kill_pid = kill
        self.ended = ""
        """Why the process is gone or going (empty while it serves)."""

    @classmethod
    async def open(cls, spawned: Spawned, spec: GameSpec, config: dict[str, Any], *, session_id: str,
                   limits: SessionLimits, frame_limit: int, kill: Callable[[int], None]) -> SandboxedGame:
        """Connect to a spawned process and construct the game there (`spec.cls(**config)`)."""
        output = GameOutput(spawned.output_fd, session_id=session_id, env_name=spec.name)
        reader, writer = await asyncio.open_unix_connection(sock=spawned.sock)
        game = cls(spawned, reader, writer, output=output, limits=limits, frame_limit=frame_limit, kill=kill)
        try:
            await game.call({"call": "construct", "config": config}, f"{spec.cls.__name__}()", invalid=True)
        except BaseException:
            await asyncio.shield(game.discard())
            raise
        return game

    async def reset(self, arguments: dict[str, Any], what: str) -> ResetOutcome:
        result = await self.call({"call": "reset", "arguments": arguments}, what, invalid=True)
        return self._checked(what, lambda: reset_outcome_from_wire(result, self.limits.max_observation_chars))

    async def step(self, action: str, seat_kwargs: dict[str, str], what: str) -> StepResult:
        result = await self.call({"call": "step", "action": action, "seat_kwargs": seat_kwargs}, what)
        return self._checked(what, lambda: step_result_from_wire(result, self.limits.max_observation_chars))

    async def close(self) -> None:
        """The game's close(), then the process exits (killed if it does not within a second)."""
        try:
            if not self.ended:
                await self.call({"call": "close"}, "close()")
                self.ended = "closed"
        finally:
            await asyncio.shield(self._reap(CLOSE_EXIT_WAIT_S))

    async def discard(self) -> None:
        self._kill("discarded")
        await self._reap(EXIT_WAIT_S)

    async def call(self, request: dict[str, Any], what: str, *, invalid: bool = False) -> Any:
        """Send one request and return the reply's result; the domain error otherwise."""
        if self.ended:
            raise EnvironmentCrashed(f"{what}: the game's process {self.ended}")
        try:
            async with asyncio.timeout(self.limits.call_timeout_s):
                reply = await self._exchange(wire.encode(request))
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
        except (asyncio.IncompleteReadError, ConnectionError):
            raise await self._crash(what) from None
        return self._result(reply, what, invalid=invalid)

    async def _exchange(self, payload: bytes) -> Any:
        self.writer.write(wire.frame(payload))
        await self.writer.drain()
        length = wire.frame_length(await self.reader.readexactly(wire.HEADER.size), self.frame_limit)
        return wire.decode(await self.reader.readexactly(length))

    def _result(self, reply: Any, what: str, *, invalid: bool) -> Any:
        if isinstance(reply, dict) and "ok" in reply:
            return reply["ok"]
        error = reply.get("error") if isinstance(reply, dict) else None
        if not isinstance(error, dict) or not all(isinstance(error.get(k), str) for k in
                                                   ("kind", "raised", "message", "traceback")):
            self._kill("sent an invalid reply; it was killed")
            raise EnvironmentCrashed(f"{what} failed: the game's process sent an invalid reply: "
                                     f"{str(reply)[:200]!r}")
        if error["kind"] == "not_your_turn":
            raise NotYourTurnError(error["message"])
        if error["kind"] == "config" and invalid:
            raise InvalidArgument(error["message"])
        raise EnvironmentFailure(f"{what} raised {error['raised']}", traceback=error["traceback"])

    def _checked(self, what: str, convert: Callable[[], Any]) -> Any:
        """The EnvHost's own check of a reply the process's checks should have refused."""
        try:
            return convert()
        except (TypeError, ValueError) as error:
            self._kill("sent an invalid result; it was killed")
            raise EnvironmentCrashed(f"{what} failed: the game's process sent an invalid result: "
                                     f"{error}") from None

    async def _crash(self, what: str, reason: str = "") -> EnvironmentCrashed:
        """The error for a process that died (or was killed for `reason`), once it is reaped."""
        status = await self._wait_exit(EXIT_WAIT_S)
        described, kind = wire.describe_exit(status, memory_limit_mb=self.limits.memory_limit_mb,
                                             cpu_seconds=self.limits.cpu_seconds_per_call)
        self.ended = reason or described
        tail = self.output.tail_text()
        return EnvironmentCrashed(f"{what} failed: the game's process {self.ended}", metric_kind=kind,
                                  traceback=f"last output of the game's process:\n{tail}" if tail else "")

    def _kill(self, reason: str) -> None:
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
        self.writer.close()
        self.output.close()
