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

A process may serve several sessions of one owner, game and config, one after the other (a warm
process: `sandbox_pool`): each session constructs a new game object, and a close asking to keep
the process answers whether it may be reused: only if no call of any session it served raised,
and the game left no thread, child process (the process is a child subreaper, so even a
daemonised grandchild stays its child), open file, pending asyncio task or changed working
directory behind, and its address space grew by at most 1/8 of the memory limit since its first
session (each session's construct raises the address-space cap to the size then plus the
limit). Otherwise it exits after answering. A shared process (`shared_worker`) serves several
sessions' games at once, by slot, and gets their calls in batches. Game processes run under the
normal scheduler policy (not SCHED_BATCH, whose wake-up delay on a busy host cost every reset
a few hundred microseconds; batching already spares the EnvHost most wake-ups).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import inspect
import math
import os
import resource
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from opentinker_env import AsyncAbstractGame, GameClass, GameConfigError, NotYourTurn
from opentinker_envhost import sandbox_protocol as wire
from opentinker_envhost.errors import utf8_safe
from opentinker_runtime.edge.errors import clip_middle
from opentinker_envhost.game_calls import MAX_TRACEBACK_CHARS, GameRaised
from opentinker_envhost.game_results import reset_call, reset_outcome_to_wire, step_call, step_result_to_wire

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MIB = 1 << 20
REUSE_MEMORY_FRACTION = 0.125
"""A process whose address space grew by more than this fraction of the memory limit since its
first session is not reused (each session may allocate the whole limit beyond what the process
maps when the session starts, so a kept process peaks at most this fraction above a new one)."""


@dataclass(frozen=True, kw_only=True)
class ChildLimits:
    """What a game process may use, from the EnvHost's settings."""

    memory_limit_mb: int
    cpu_seconds_per_call: float
    max_observation_chars: int
    frame_limit: int


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` when our parent exits (elsewhere: nothing)."""
    _prctl(PR_SET_PDEATHSIG, int(sig))


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(option, value)


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
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of what the game starts stay our children
    _redirect_output(out_fd)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limit_address_space(limits.memory_limit_mb)


def limit_address_space(memory_limit_mb: int) -> None:
    """Cap the address space at its size now plus `memory_limit_mb` (a session's budget)."""
    address_space = _address_space_bytes() + memory_limit_mb * MIB
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


class CpuBudget:
    """Each call may use `seconds` of CPU time: ITIMER_PROF (SIGPROF) when it has, and the
    RLIMIT_CPU soft limit (SIGXCPU, whole seconds) at the time used so far plus the budget plus
    one second, in case the game resets the timer. The soft limit is only rewritten when that
    whole second changes.

    The timer is armed for the budget plus `slack` (1% of it, at most 10 ms) and re-armed for a
    call only once `slack` of wall time has passed since: a process uses no more CPU time than
    wall time, so every call still gets at least the whole budget, and the calls of a batch of
    fast ones cost no system call each."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.slack = min(seconds / 100, 0.01)
        self.hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        self.soft = -1
        self.armed_at = -math.inf

    def start(self) -> None:
        now = time.perf_counter()
        if now - self.armed_at < self.slack:
            return  # armed for seconds + slack under `slack` ago: at least `seconds` are left
        soft = math.ceil(time.process_time() + self.seconds) + 1  # user + system time so far
        if self.hard != resource.RLIM_INFINITY:
            soft = min(soft, self.hard)
        if soft != self.soft:
            resource.setrlimit(resource.RLIMIT_CPU, (soft, self.hard))
            self.soft = soft
        signal.setitimer(signal.ITIMER_PROF, self.seconds + self.slack)
        self.armed_at = now

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        self.armed_at = -math.inf


class GameServer:
    """Runs the calls of the sessions this process serves, one session at a time."""

    def __init__(self, game_cls: GameClass, limits: ChildLimits) -> None:
        self.game_cls = game_cls
        self.limits = limits
        self.is_async = issubclass(game_cls, AsyncAbstractGame)
        self.games: dict[Any, Any] = {}
        """The games this process serves, by slot (slot 0 only, unless the process is shared)."""
        self.loop = asyncio.new_event_loop() if self.is_async else None  # before the baseline's fds
        self.failed = False
        """A call raised: this process serves no further session."""
        self.baseline: ProcessBaseline | None = None

    def serve(self, fd: int) -> None:
        """Answer requests until end of stream, or a close after which the process is not kept.
        A frame holding one request (a dict) is one call of slot 0 (a process of its own); a frame
        holding a list is a batch of calls, each naming its slot (a shared process:
        `shared_worker`), answered in order by as few frames as fit the frame limit.

        An async game's process serves from inside its event loop (`_serve_in_loop`): each call
        is awaited in that one running task, so a call that never suspends costs no turn of the
        loop, where starting and stopping the loop for every call cost ~35 us of CPU."""
        if self.is_async:
            self.loop.run_until_complete(self._serve_in_loop(fd))
            return
        frames, budget = wire.FrameReader(fd), CpuBudget(self.limits.cpu_seconds_per_call)
        while (payload := frames.next()) is not None:
            request = wire.decode(payload)
            if isinstance(request, list):
                try:
                    replies = [self._timed(budget, self.answer, item) for item in request]
                finally:
                    budget.stop()
                self._send_batch(fd, replies)
                continue
            budget.start()
            reply = self.answer(request)
            budget.stop()
            if self._send_one(fd, request, reply):
                return

    async def _serve_in_loop(self, fd: int) -> None:
        """`serve` for an async game: the same frames, calls awaited in this task. Between calls
        the loop waits in the blocking read, so a game's background tasks run only while a call
        awaits, as they did when each call ran the loop."""
        frames, budget = wire.FrameReader(fd), CpuBudget(self.limits.cpu_seconds_per_call)
        while (payload := frames.next()) is not None:
            request = wire.decode(payload)
            if isinstance(request, list):
                replies = []
                try:
                    for item in request:
                        started = time.perf_counter()
                        budget.start()
                        reply = await self.answer_async(item if isinstance(item, dict) else {"call": None})
                        reply["s"] = time.perf_counter() - started
                        replies.append(reply)
                finally:
                    budget.stop()
                self._send_batch(fd, replies)
                continue
            budget.start()
            reply = await self.answer_async(request)
            budget.stop()
            if self._send_one(fd, request, reply):
                return

    def _timed(self, budget: CpuBudget, answer: Any, item: Any) -> dict[str, Any]:
        """One call of a batch, its reply with its wall seconds ("s"); each call has the whole
        budget (re-armed when it may not)."""
        started = time.perf_counter()
        budget.start()
        reply = answer(item if isinstance(item, dict) else {"call": None})
        reply["s"] = time.perf_counter() - started
        return reply

    def _send_one(self, fd: int, request: dict[str, Any], reply: dict[str, Any]) -> bool:
        """Send a lone call's reply; True when the process ends after it (a close not kept)."""
        _flush_output()
        wire.write_blocking(fd, wire.frame(self._encode(reply)))
        return request.get("call") == "close" and not (reply.get("ok") or {}).get("reusable")

    def _send_batch(self, fd: int, replies: list[dict[str, Any]]) -> None:
        """A batch's replies, in one frame when they fit. A shared process never exits by
        itself: the EnvHost ends it."""
        _flush_output()
        try:
            payload = wire.encode_results(replies)  # the common case: one encoding, one frame
        except (UnicodeEncodeError, ValueError, TypeError):
            payload = b""
        if payload and len(payload) <= self.limits.frame_limit:
            wire.write_blocking(fd, wire.frame(payload))
        else:
            self._send_one_by_one(fd, replies)

    def _send_one_by_one(self, fd: int, replies: list[dict[str, Any]]) -> None:
        """Replies encoded each on its own (one that cannot be sent becomes an error reply), in
        as few frames as fit the frame limit."""
        encoded: list[bytes] = []
        size = 0
        for reply in replies:
            item = self._encode(reply)
            if size + len(item) + len(encoded) + 2 > self.limits.frame_limit and encoded:
                wire.write_blocking(fd, wire.frame(b"[" + b",".join(encoded) + b"]"))
                encoded, size = [], 0
            encoded.append(item)
            size += len(item)
        wire.write_blocking(fd, wire.frame(b"[" + b",".join(encoded) + b"]"))

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to one request: {"ok": result} or {"error": {...}}."""
        try:
            call, finish = self._plan(request)
            return {"ok": finish(self._call(call) if call is not None else None)}
        except MemoryError:
            raise
        except BaseException as error:  # noqa: BLE001 - user code: every failure is reported
            self.failed = True
            return {"error": _error_reply(error)}

    async def answer_async(self, request: dict[str, Any]) -> dict[str, Any]:
        """`answer` inside the running loop: a call's awaitable is awaited in this task."""
        try:
            call, finish = self._plan(request)
            if call is None:
                return {"ok": finish(None)}
            result = call()
            if inspect.isawaitable(result):
                result = await result
            return {"ok": finish(result)}
        except MemoryError:
            raise
        except BaseException as error:  # noqa: BLE001 - user code: every failure is reported
            self.failed = True
            return {"error": _error_reply(error)}

    def _plan(self, request: dict[str, Any]) -> tuple[Any, Any]:
        """The game call a request makes (a callable, or None for none) and what turns its
        result into the reply's value. A construct builds the game here."""
        call, max_chars = request.get("call"), self.limits.max_observation_chars
        slot = request.get("slot", 0)
        if call == "construct":
            if self.baseline is None:
                self.baseline = ProcessBaseline.now()
            else:  # a kept or shared process: this session may allocate its whole budget too
                limit_address_space(self.limits.memory_limit_mb)
            self.games.pop(slot, None)  # the last session's game goes before the next one is built
            self.games[slot] = self.game_cls(**request["config"])
            return None, _nothing
        if call == "reset":
            return reset_call(self._game(slot), request["arguments"], is_async=self.is_async,
                              max_chars=max_chars), reset_outcome_to_wire
        if call == "step":
            return step_call(self._game(slot), request["action"], request["seat_kwargs"], is_async=self.is_async,
                             max_chars=max_chars, truncated=request.get("truncated") is True), step_result_to_wire
        if call == "close":
            game = self.games.pop(slot, None)
            return (game.close if game is not None else None), functools.partial(self._closed, request)
        raise ValueError(f"unknown call {call!r}")

    def _closed(self, request: dict[str, Any], _: Any) -> dict[str, bool] | None:
        if not request.get("keep"):
            return None
        return {"reusable": self._reusable() if not self.games else not self.failed}

    def _game(self, slot: Any) -> Any:
        game = self.games.get(slot)
        if game is None:
            raise ValueError(f"no game in slot {slot!r}")
        return game

    def _reusable(self) -> bool:
        """Whether another session may get this process (see the module doc)."""
        if self.failed or self.baseline is None or threading.active_count() != 1:
            return False
        if self.loop is not None and _pending_tasks(self.loop):
            return False
        try:
            os.waitpid(-1, os.WNOHANG)
            return False  # a child (or a descendant it left us) is alive, or just ended
        except ChildProcessError:
            pass
        growth_limit = REUSE_MEMORY_FRACTION * self.limits.memory_limit_mb * MIB
        return self.baseline.unchanged_but_memory(growth_limit)

    def _call(self, fn: Any) -> Any:
        result = fn()
        if not inspect.isawaitable(result):
            return result
        self.loop = self.loop or asyncio.new_event_loop()  # a sync game's method may return an awaitable
        ok, value = self.loop.run_until_complete(_settled(result))
        if not ok:
            raise value  # re-raised here, so its traceback starts in the game, not in asyncio
        return value

    def _encode(self, reply: dict[str, Any]) -> bytes:
        """The reply as JSON; an error reply instead when it cannot be sent as it is."""
        try:
            payload = wire.encode_results(reply)
        except (UnicodeEncodeError, ValueError, TypeError) as error:
            return wire.encode({"error": _error_reply(ValueError(f"the result cannot be sent: {error}"))})
        if len(payload) > self.limits.frame_limit:
            problem = f"the result is {len(payload)} bytes as JSON; the limit is {self.limits.frame_limit}"
            return wire.encode({"error": _error_reply(ValueError(problem))})
        return payload


@dataclass(frozen=True)
class ProcessBaseline:
    """What a game process looks like before its first game is built."""

    open_fds: int
    cwd: str
    address_space: int

    @classmethod
    def now(cls) -> ProcessBaseline:
        return cls(open_fds=len(os.listdir("/proc/self/fd")), cwd=os.getcwd(),
                   address_space=_address_space_bytes())

    def unchanged_but_memory(self, growth_limit: float) -> bool:
        """Same open files and working directory, address space grown by at most `growth_limit`."""
        now = ProcessBaseline.now()
        return (now.open_fds <= self.open_fds and now.cwd == self.cwd
                and now.address_space - self.address_space <= growth_limit)


def _nothing(_: Any) -> None:
    return None


def _pending_tasks(loop: asyncio.AbstractEventLoop) -> set[asyncio.Task[Any]]:
    """The loop's unfinished tasks other than the one serving calls (an async game's process)."""
    serving = asyncio.current_task(loop)  # None when the loop is not running
    return {task for task in asyncio.all_tasks(loop) if task is not serving}


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
