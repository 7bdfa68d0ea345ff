"""One game process: forked by the fork server, it builds one game and serves its calls.

Before the game runs, the process leaves the fork server's process group for its own (so the
EnvHost can kill it together with anything the game starts), asks the kernel to SIGKILL it
when the fork server dies, points fd 1 and 2 at the output pipe the EnvHost reads (a game that
prints cannot corrupt the session socket or the EnvHost's log), caps its address space at its
size after the fork plus `memory_limit_mb`, and disables core dumps. Each call gets
`cpu_seconds_per_call` of CPU time: a profiling timer (ITIMER_PROF) sends SIGPROF when the call
has used it, and the RLIMIT_CPU soft limit, raised before each call to the time used so far plus
the budget plus one second (its unit is whole seconds), sends SIGXCPU as a backstop; the default
action of both ends the process, even inside C code. A MemoryError ends the process with
EXIT_MEMORY (the game's state is unknown after it).

Requests and replies are frames (`sandbox_protocol`); sync game methods run on this process's
only thread, async ones on one event loop kept for the process's life.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import inspect
import math
import os
import resource
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from opentinker.env import AsyncAbstractGame, GameClass, GameConfigError, NotYourTurn
from opentinker_envhost import sandbox_protocol as wire
from opentinker_envhost.errors import clip_middle, utf8_safe
from opentinker_envhost.game_calls import MAX_TRACEBACK_CHARS, GameRaised
from opentinker_envhost.game_results import reset_call, reset_outcome_to_wire, step_call, step_result_to_wire

PR_SET_PDEATHSIG = 1
MIB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class ChildLimits:
    """What a game process may use, from the EnvHost's settings."""

    memory_limit_mb: int
    cpu_seconds_per_call: float
    max_observation_chars: int
    frame_limit: int


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` when our parent exits (elsewhere: nothing)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))


def run_child(sock_fd: int, out_fd: int, game_cls: GameClass, limits: ChildLimits, parent_pid: int) -> None:
    """Set the process up, serve the game until close or end of stream, exit. Never returns."""
    code = 0
    try:
        _prepare_process(out_fd, limits, parent_pid)
        GameServer(game_cls, limits).serve(sock_fd)
    except MemoryError:
        code = wire.EXIT_MEMORY
    except BaseException:  # noqa: BLE001 - our own failure: its traceback goes to the output pipe
        code = wire.EXIT_SANDBOX_FAILED
        traceback.print_exc()
    finally:
        _flush_output()
        os._exit(code)


def _prepare_process(out_fd: int, limits: ChildLimits, parent_pid: int) -> None:
    os.setpgid(0, 0)
    set_parent_death_signal()
    if os.getppid() != parent_pid:  # the fork server died before the death signal was set
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _redirect_output(out_fd)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    address_space = _address_space_bytes() + limits.memory_limit_mb * MIB
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or address_space < hard:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, hard))


def _address_space_bytes() -> int:
    """This process's virtual size now (what the preloaded modules already map)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _redirect_output(out_fd: int) -> None:
    _flush_output()
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.reconfigure(line_buffering=True, errors="backslashreplace")  # type: ignore[union-attr]


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()  # type: ignore[union-attr]


def set_cpu_budget(seconds: float) -> None:
    """End this process (SIGPROF) once the next call has used `seconds` of CPU time; RLIMIT_CPU
    (SIGXCPU, whole seconds) one second later in case the game resets the timer."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + seconds) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    signal.setitimer(signal.ITIMER_PROF, seconds)


def clear_cpu_budget() -> None:
    signal.setitimer(signal.ITIMER_PROF, 0)


class GameServer:
    """Runs the calls one session makes on its game."""

    def __init__(self, game_cls: GameClass, limits: ChildLimits) -> None:
        self.game_cls = game_cls
        self.limits = limits
        self.is_async = issubclass(game_cls, AsyncAbstractGame)
        self.game: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def serve(self, fd: int) -> None:
        """Answer requests until end of stream or a close."""
        while (payload := wire.read_frame_blocking(fd)) is not None:
            request = wire.decode(payload)
            set_cpu_budget(self.limits.cpu_seconds_per_call)
            reply = self.answer(request)
            clear_cpu_budget()
            _flush_output()
            wire.write_blocking(fd, wire.frame(self._encode(reply)))
            if request.get("call") == "close":
                return

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to one request: {"ok": result} or {"error": {...}}."""
        try:
            return {"ok": self._run(request)}
        except MemoryError:
            raise
        except BaseException as error:  # noqa: BLE001 - user code: every failure is reported
            return {"error": _error_reply(error)}

    def _run(self, request: dict[str, Any]) -> Any:
        call, max_chars = request.get("call"), self.limits.max_observation_chars
        if call == "construct":
            self.game = self.game_cls(**request["config"])
            return None
        if call == "reset":
            return reset_outcome_to_wire(self._call(reset_call(
                self.game, request["arguments"], is_async=self.is_async, max_chars=max_chars)))
        if call == "step":
            return step_result_to_wire(self._call(step_call(
                self.game, request["action"], request["seat_kwargs"], is_async=self.is_async,
                max_chars=max_chars)))
        if call == "close":
            if self.game is not None:
                self._call(self.game.close)
            return None
        raise ValueError(f"unknown call {call!r}")

    def _call(self, fn: Any) -> Any:
        result = fn()
        if not inspect.isawaitable(result):
            return result
        self.loop = self.loop or asyncio.new_event_loop()
        ok, value = self.loop.run_until_complete(_settled(result))
        if not ok:
            raise value  # re-raised here, so its traceback starts in the game, not in asyncio
        return value

    def _encode(self, reply: dict[str, Any]) -> bytes:
        """The reply as JSON; an error reply instead when it cannot be sent as it is."""
        try:
            payload = wire.encode(reply)
        except (UnicodeEncodeError, ValueError, TypeError) as error:
            return wire.encode({"error": _error_reply(ValueError(f"the result cannot be sent: {error}"))})
        if len(payload) > self.limits.frame_limit:
            problem = f"the result is {len(payload)} bytes as JSON; the limit is {self.limits.frame_limit}"
            return wire.encode({"error": _error_reply(ValueError(problem))})
        return payload


async def _settled(awaitable: Any) -> tuple[bool, Any]:
    try:
        return True, await awaitable
    except BaseException as error:  # noqa: BLE001 - user code: every failure is reported
        return False, error


def _error_reply(error: BaseException) -> dict[str, str]:
    """kind (ERROR_KINDS), raised ("Type: message", clipped), message (the exception's own
    text, for NotYourTurn and GameConfigError) and the game's traceback."""
    raised = GameRaised(error)
    kind = ("not_your_turn" if isinstance(error, NotYourTurn)
            else "config" if isinstance(error, GameConfigError) else "raised")
    return {"kind": kind, "raised": utf8_safe(str(raised)),
            "message": utf8_safe(clip_middle(str(error), MAX_TRACEBACK_CHARS)),
            "traceback": utf8_safe(raised.traceback)}
