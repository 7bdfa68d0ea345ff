"""Environment sessions: open, reset, step and close games by session id.

A session is one game instance, in its own process (isolation "process", the default:
`sandbox`) or in this one (isolation "thread": `game_hosts.ThreadHost`). Its calls are
serialised by a per-session lock (in arrival order), so one client may pipeline reset and
step; different sessions run concurrently, and a blocking game never stalls the event loop. A
game that raises fails that call only (EnvironmentFailure with its traceback; the session then
needs a reset); a call that times out or is cancelled breaks the session (a sandboxed game's
process is killed; a thread may still be running), and so does a game process that dies
(EnvironmentCrashed: memory or CPU-time limit, a signal, an exit): only CloseSession is
accepted then. Sessions idle for longer than the TTL are closed by `reap_idle`, and so are
sessions that got no call within `unclaimed_ttl_s` of opening (an OpenSession given up just as
it finished leaves a session nobody knows the id of), and so are the sandbox's warm processes
idle past theirs; `close_all` also stops the sandbox. A job's session may be built in a warm
process (`sandbox_pool`): its owner is (tenant, job, attempt); sessions with no job never share
a process. Open sessions, steps, step time and game failures (by kind) are
counted (`opentinker_envhost.metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import inspect
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from opentinker_env import StepResult
from opentinker_envhost.catalog import GameCatalog, GameSpec
from opentinker_envhost.errors import (
    EnvHostError,
    EnvironmentCrashed,
    EnvironmentFailure,
    EnvironmentTimeout,
    InvalidArgument,
    NotYourTurnError,
    RequestIdReused,
    SessionLimitReached,
    SessionNotFound,
    WrongSessionState,
    env_error_kind,
)
from opentinker_envhost.game_hosts import GameHandle, game_host
from opentinker_envhost.game_results import ResetOutcome, step_method
from opentinker_envhost.limits import Isolation, SessionLimits
from opentinker_envhost.metrics import OPEN_SESSIONS, STEP_SECONDS, STEPS, count_env_error
from opentinker_envhost.session_lock import SessionLock

__all__ = ["Isolation", "ResetOutcome", "Session", "SessionLimits", "SessionManager", "SessionState"]

log = structlog.get_logger(__name__)

Then = Callable[[Any, BaseException | None], None]
"""Told a call's outcome: (its result, None), or (None, the error)."""


class SessionState(enum.StrEnum):
    AWAITING_RESET = "awaiting_reset"
    PLAYING = "playing"
    DONE = "done"
    BROKEN = "broken"
    CLOSED = "closed"


@dataclass(kw_only=True, eq=False)
class Session:
    """One open game instance and its bookkeeping."""

    session_id: str
    spec: GameSpec
    game: GameHandle
    job_id: str
    attempt: str
    """Which attempt of the job opened it (a digest of its verified job token; "" unknown)."""
    request_id: str
    request_key: str
    last_used: float
    state: SessionState = SessionState.AWAITING_RESET
    note: str = "no episode yet"
    """Why the session is AWAITING_RESET or BROKEN, for FAILED_PRECONDITION messages."""
    steps: int = 0
    claimed: bool = False
    """Whether a call after OpenSession used the session (its opener has its id)."""
    lock: SessionLock = field(default_factory=SessionLock)


class SessionManager:
    """All open sessions of one EnvHost."""

    def __init__(self, catalog: GameCatalog, limits: SessionLimits = SessionLimits(), *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.catalog = catalog
        self.limits = limits
        self.clock = clock
        self.host = game_host(catalog, limits)
        self.sessions: dict[str, Session] = {}
        self.by_request_id: dict[str, str] = {}
        self.opening = 0

    # -- open / close -----------------------------------------------------------------------

    async def open(self, env_name: str, config: Mapping[str, Any], *, job_id: str = "",
                   request_id: str = "", attempt: str = "", tenant: str = "") -> Session:
        """A new session of `env_name` built with `config`; a retried request_id returns the
        session it opened before. `attempt` names the job's attempt (checked by the caller to be
        the current one): the sessions its earlier attempts opened here are closed first.
        `tenant` is the caller's: a job's session (process isolation) may be built in a process
        kept from an earlier session of the same tenant, job, attempt, game and config."""
        spec = self.catalog.get(_required("env_name", env_name))
        await self.close_earlier_attempts(job_id, attempt)
        key = _request_key(env_name, config, job_id)
        existing = self._session_for_request(request_id, key)
        if existing is not None:
            existing.last_used = self.clock()  # answered again: its unclaimed time starts anew
            return existing
        self._reserve_slot()
        session_id = uuid.uuid4().hex
        try:
            owner = (tenant, job_id, attempt) if job_id else ()
            game = await self._construct(spec, dict(config), session_id, owner)
        except (EnvironmentFailure, EnvironmentTimeout, InvalidArgument) as error:
            count_env_error(spec.name, "construct", _error_kind(error))
            raise
        finally:
            self.opening -= 1
        return await self._register(spec, game, session_id=session_id, job_id=job_id, attempt=attempt,
                                    request_id=request_id, key=key)

    async def start(self) -> None:
        """Start the sandbox's fork server now rather than at the first open (process mode)."""
        await self.host.start()

    async def close(self, session_id: str) -> int:
        """Close a session (its game's close() runs; errors are logged); the steps it served."""
        session = self.sessions.pop(_required("session_id", session_id), None)
        if session is None:
            raise SessionNotFound(f"session_id: no open session {session_id!r}")
        self.by_request_id.pop(session.request_id, None)
        OPEN_SESSIONS.labels(env=session.spec.name).dec()
        async with session.lock:
            if session.state is SessionState.BROKEN:  # never call a broken game again
                await session.game.discard()
            else:
                await self._close_game(session)
            session.state = SessionState.CLOSED
        log.info("session_closed", session_id=session_id, env_name=session.spec.name, steps=session.steps)
        return session.steps

    async def close_earlier_attempts(self, job_id: str, attempt: str) -> list[str]:
        """Close the sessions of `job_id` opened by another attempt than `attempt` (the current
        one): that attempt was replaced, nobody will use them again. Their ids."""
        if not job_id or not attempt:
            return []
        stale = [s.session_id for s in self.sessions.values()
                 if s.job_id == job_id and s.attempt and s.attempt != attempt]
        for session_id in stale:
            log.info("session_of_replaced_attempt_closed", session_id=session_id, job_id=job_id[:128])
        await asyncio.gather(*(self._close_quietly(session_id) for session_id in stale))
        return stale

    async def _close_quietly(self, session_id: str) -> None:
        with contextlib.suppress(SessionNotFound):  # closed meanwhile by its client
            await self.close(session_id)

    async def reap_idle(self) -> list[str]:
        """Close sessions idle longer than the TTL, and those never used within the unclaimed
        TTL of opening (not those in a call); their ids."""
        now = self.clock()
        expired = [(s.session_id, ttl) for s in self.sessions.values() if not s.lock.locked()
                   for ttl in [self._ttl_of(s)] if s.last_used < now - ttl]
        for session_id, ttl in expired:
            log.info("session_idle_expired", session_id=session_id, ttl_s=ttl)
            with contextlib.suppress(SessionNotFound):  # closed meanwhile by its client
                await self.close(session_id)
        self.host.reap_idle()  # warm processes kept too long
        return [session_id for session_id, _ in expired]

    def _ttl_of(self, session: Session) -> float:
        if session.claimed:
            return self.limits.idle_ttl_s
        return min(self.limits.unclaimed_ttl_s, self.limits.idle_ttl_s)

    async def close_all(self) -> None:
        """Close every session, then stop the sandbox (no game process outlives this)."""
        for session_id in list(self.sessions):
            await self.close(session_id)
        await self.host.shutdown()

    # -- play -------------------------------------------------------------------------------

    async def reset(self, session_id: str, kwargs: Mapping[str, Any], *,
                    seed: int | None = None) -> ResetOutcome:
        """Start an episode: reset(**kwargs), plus `seed=` when given and accepted."""
        session = self._get(session_id)
        async with session.lock:
            self._require_not_broken(session)
            arguments = _reset_arguments(session, kwargs, seed)
            outcome = await self._game_call(session, "reset()",
                                            functools.partial(session.game.reset, arguments))
            session.state, session.note = SessionState.PLAYING, ""
            return outcome

    async def step(self, session_id: str, action: str, *, seat: str = "", truncated: bool = False) -> StepResult:
        """Apply `action` (`truncated`: a token limit cut it off, so the game's `on_truncated`
        judges it); FAILED_PRECONDITION unless an episode is in progress."""
        session = self._get(session_id)
        async with session.lock:
            self._require_playing(session)
            call = functools.partial(session.game.step, action, _seat_kwargs(session.spec, seat), truncated=truncated)
            step_seconds, steps = _step_metrics(session.spec.name)
            started = time.perf_counter()
            try:
                result = await self._game_call(session, step_method(truncated), call)
            finally:
                step_seconds.observe(time.perf_counter() - started)
            steps.inc()
            session.steps += 1
            session.state = SessionState.DONE if result.done else SessionState.PLAYING
            return result

    def reset_soon(self, session_id: str, kwargs: Mapping[str, Any], then: Then, *, seed: int | None = None) -> bool:
        """`reset` without a coroutine: see `step_soon`."""
        session = self._get(session_id)

        def start(reset_soon: Callable[..., bool]) -> bool:
            self._require_not_broken(session)
            arguments = _reset_arguments(session, kwargs, seed)
            what = f"{session.spec.cls.__name__}.reset()"
            return reset_soon(arguments, what, functools.partial(self._reset_done, session, what, then))
        return _soon(session, "reset_soon", start)

    def _reset_done(self, session: Session, what: str, then: Then,
                    outcome: ResetOutcome | None, error: BaseException | None) -> None:
        """The end of a `reset_soon`: what `reset` does after its game call."""
        try:
            if error is not None:
                self._game_failed(session, what, "reset()", error)
            else:
                session.state, session.note = SessionState.PLAYING, ""
        finally:
            session.lock.release()
        then(outcome, error)

    def step_soon(self, session_id: str, action: str, then: Then, *, seat: str = "") -> bool:
        """`step` without a coroutine, where the session's game allows it (a shared game process)
        and no other call holds or awaits the session: `then(result, None)` or `then(None,
        error)` follows, with the session updated as `step` would. False, with nothing done, when
        it cannot: call `step`. Raises what `step` raises before the game is called."""
        session = self._get(session_id)

        def start(step_soon: Callable[..., bool]) -> bool:
            self._require_playing(session)
            seat_kwargs = _seat_kwargs(session.spec, seat)
            what = f"{session.spec.cls.__name__}.step()"
            return step_soon(action, seat_kwargs, what,
                             functools.partial(self._stepped, session, what, time.perf_counter(), then))
        return _soon(session, "step_soon", start)

    def _stepped(self, session: Session, what: str, started: float, then: Then,
                 result: StepResult | None, error: BaseException | None) -> None:
        """The end of a `step_soon`: what `step` does after its game call."""
        step_seconds, steps = _step_metrics(session.spec.name)
        step_seconds.observe(time.perf_counter() - started)
        try:
            if error is not None:
                self._game_failed(session, what, "step()", error)
            else:
                steps.inc()
                session.steps += 1
                session.state = SessionState.DONE if result.done else SessionState.PLAYING  # type: ignore[union-attr]
        finally:
            session.lock.release()
        then(result, error)

    # -- internals --------------------------------------------------------------------------

    def job_of(self, session_id: str) -> str:
        """The job an open session belongs to ("" for none, or no such session)."""
        session = self.sessions.get(session_id)
        return session.job_id if session is not None else ""

    def _get(self, session_id: str) -> Session:
        session = self.sessions.get(_required("session_id", session_id))
        if session is None:
            raise SessionNotFound(f"session_id: no open session {session_id!r}")
        session.last_used = self.clock()
        session.claimed = True
        return session

    def _session_for_request(self, request_id: str, key: str) -> Session | None:
        session_id = self.by_request_id.get(request_id) if request_id else None
        if session_id is None:
            return None
        session = self.sessions[session_id]
        if session.request_key != key:
            raise RequestIdReused(f"request_id: {request_id!r} already opened a session with a "
                                  "different env_name, config or job_id")
        return session

    def _reserve_slot(self) -> None:
        if len(self.sessions) + self.opening >= self.limits.max_sessions:
            raise SessionLimitReached(f"max_sessions: this EnvHost already has "
                                      f"{self.limits.max_sessions} sessions open; close some first")
        self.opening += 1

    async def _construct(self, spec: GameSpec, config: dict[str, Any], session_id: str,
                         owner: tuple[str, ...]) -> GameHandle:
        _check_arguments(spec.cls, config, "config", f"{spec.cls.__name__}()")
        return await self.host.open(spec, config, session_id, owner)

    async def _register(self, spec: GameSpec, game: GameHandle, *, session_id: str, job_id: str,
                        attempt: str, request_id: str, key: str) -> Session:
        if request_id in self.by_request_id:  # a concurrent retry won the race: keep its session
            with contextlib.suppress(EnvHostError):
                await game.close()
            return self._session_for_request(request_id, key)  # type: ignore[return-value]
        session = Session(session_id=session_id, spec=spec, game=game, job_id=job_id, attempt=attempt,
                          request_id=request_id, request_key=key, last_used=self.clock())
        self.sessions[session.session_id] = session
        OPEN_SESSIONS.labels(env=spec.name).inc()
        if request_id:
            self.by_request_id[request_id] = session.session_id
        log.info("session_opened", session_id=session.session_id, env_name=spec.name, job_id=job_id)
        return session

    async def _game_call(self, session: Session, method: str,
                         call: Callable[[str], Awaitable[Any]]) -> Any:
        """`call(what)` on the session's game; a failure moves the session to the state it
        leaves the game in, is counted, and is raised."""
        what = f"{session.spec.cls.__name__}.{method}"
        try:
            return await call(what)
        except (EnvHostError, asyncio.CancelledError) as error:
            self._game_failed(session, what, method, error)
            raise

    def _game_failed(self, session: Session, what: str, method: str, error: BaseException) -> None:
        """A game call failed with `error`: move the session to the state it leaves the game in
        and count it (a turn out of order is the caller's, not the game's: the episode goes on)."""
        if isinstance(error, NotYourTurnError):
            return
        if isinstance(error, InvalidArgument):
            _await_reset(session, "the last reset was rejected")
        elif isinstance(error, EnvironmentTimeout):
            _break(session, f"{what} timed out; {self._timeout_note()}")
        elif isinstance(error, EnvironmentCrashed):
            _break(session, error.message)
            log.warning("environment_crashed", session_id=session.session_id, error=error.message,
                        kind=error.metric_kind, output=error.traceback)
        elif isinstance(error, EnvironmentFailure):
            _await_reset(session, f"the episode failed: {error.message}")
            log.warning("environment_failed", session_id=session.session_id, error=error.message,
                        traceback=error.traceback)
        elif isinstance(error, asyncio.CancelledError):
            _break(session, f"{what} was cancelled while the game ran")
        else:
            return
        _count_error(session, method, error)

    def _timeout_note(self) -> str:
        if Isolation(self.limits.isolation) is Isolation.THREAD:
            return "the game may still be running"
        return "its process was killed"

    async def _close_game(self, session: Session) -> None:
        try:
            await session.game.close()
        except EnvHostError as error:
            log.warning("session_close_failed", session_id=session.session_id, error=error.message,
                        traceback=error.traceback)

    def _require_not_broken(self, session: Session) -> None:
        if session.state is SessionState.CLOSED:  # closed while this call waited for the lock
            raise SessionNotFound(f"session_id: session {session.session_id} was closed")
        if session.state is SessionState.BROKEN:
            raise WrongSessionState(f"session {session.session_id} is broken ({session.note}); "
                                    "close it and open a new one")

    def _require_playing(self, session: Session) -> None:
        self._require_not_broken(session)
        if session.state is SessionState.AWAITING_RESET:
            raise WrongSessionState(f"session {session.session_id}: step before reset "
                                    f"({session.note}); call Reset first")
        if session.state is SessionState.DONE:
            raise WrongSessionState(f"session {session.session_id}: the episode is done; "
                                    "call Reset to start another")


def _soon(session: Session, method: str, start: Callable[[Callable[..., bool]], bool]) -> bool:
    """`start(the game's <method>)` holding the session's lock, taken without awaiting; False when
    the game has no such method, the lock is busy, or `start` declines. The lock is released here
    when `start` raises or declines, else by the call's end."""
    game_soon = getattr(session.game, method, None)
    if game_soon is None or not session.lock.try_acquire():
        return False
    try:
        taken = start(game_soon)
    except BaseException:
        session.lock.release()
        raise
    if not taken:
        session.lock.release()
    return taken


@functools.lru_cache(maxsize=1024)
def _step_metrics(env_name: str) -> tuple[Any, Any]:
    """The step-time histogram and step counter of `env_name` (labels looked up once per name:
    a catalog's game names are few)."""
    return STEP_SECONDS.labels(env=env_name), STEPS.labels(env=env_name)


def _reset_arguments(session: Session, kwargs: Mapping[str, Any], seed: int | None) -> dict[str, Any]:
    """kwargs plus `seed=` when given and reset() takes it (a seed is a hint: games without
    one ignore it); InvalidArgument when reset() does not accept the kwargs."""
    spec, arguments = session.spec, dict(kwargs)
    if seed is not None and spec.reset_accepts("seed"):
        arguments.setdefault("seed", seed)
    try:
        _reset_signature(spec.cls).bind(**arguments)
    except TypeError as error:
        raise InvalidArgument(f"kwargs: {spec.cls.__name__}.reset() does not accept these arguments: "
                              f"{error}") from None
    return arguments


@functools.cache
def _reset_signature(game_cls: type) -> inspect.Signature:
    """reset()'s signature without self (read once per game class: it is on every episode's path)."""
    return inspect.signature(functools.partial(game_cls.reset, None))


def _seat_kwargs(spec: GameSpec, seat: str) -> dict[str, str]:
    """`seat=` for a seated game ("" = the seat to move: a single-agent session of it)."""
    if not spec.seats:
        if seat:
            raise InvalidArgument(f"seat: {spec.name} is a single-agent game; leave seat empty")
        return {}
    if seat and seat not in spec.seats:
        raise InvalidArgument(f"seat: expected one of {', '.join(spec.seats)}, got {seat!r}")
    return {"seat": seat}


def _check_arguments(target: Callable[..., Any], arguments: Mapping[str, Any], field_name: str,
                     what: str) -> None:
    try:
        inspect.signature(target).bind(**arguments)
    except TypeError as error:
        raise InvalidArgument(f"{field_name}: {what} does not accept these arguments: {error}") from None


def _required(field_name: str, value: str) -> str:
    if not value:
        raise InvalidArgument(f"{field_name}: required")
    return value


def _request_key(env_name: str, config: Mapping[str, Any], job_id: str) -> str:
    return json.dumps([env_name, config, job_id], sort_keys=True, default=str)


def _error_kind(error: BaseException) -> str:
    """The `kind` label of opentinker_envhost_env_errors_total for a failed game call."""
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if isinstance(error, InvalidArgument):
        return "invalid_argument"
    return env_error_kind(error) or "failed"


def _count_error(session: Session, method: str, error: BaseException) -> None:
    """Count a failed reset()/step() of `session`'s game."""
    count_env_error(session.spec.name, method.removesuffix("()"), _error_kind(error))


def _break(session: Session, note: str) -> None:
    session.state, session.note = SessionState.BROKEN, note


def _await_reset(session: Session, note: str) -> None:
    session.state, session.note = SessionState.AWAITING_RESET, note
