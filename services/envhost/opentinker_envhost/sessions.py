"""Environment sessions: open, reset, step and close games by session id.

A session is one game instance. Its calls are serialised by a per-session lock (in arrival
order), so one client may pipeline reset and step; different sessions run concurrently, and a
sync game runs in its own thread so a blocking game never stalls the event loop. A game that
raises fails that call only (EnvironmentFailure with its traceback; the session then needs a
reset); a call that times out or is cancelled breaks the session (the game may still be
running, so only CloseSession is accepted). Sessions idle for longer than the TTL are closed
by `reap_idle`. Open sessions, steps, step time and game failures are counted
(`opentinker_envhost.metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from opentinker.env import (
    DEFAULT_MAX_OBSERVATION_CHARS,
    Game,
    GameConfigError,
    StepResult,
    check_observation,
    check_step_result,
)
from opentinker_envhost.metrics import OPEN_SESSIONS, STEP_SECONDS, STEPS, count_env_error
from opentinker_envhost.catalog import GameCatalog, GameSpec
from opentinker_envhost.errors import (
    EnvHostError,
    EnvironmentFailure,
    EnvironmentTimeout,
    InvalidArgument,
    NotYourTurnError,
    RequestIdReused,
    SessionLimitReached,
    SessionNotFound,
    WrongSessionState,
)
from opentinker_envhost.game_calls import call_game

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class SessionLimits:
    """Bounds the manager enforces."""

    max_sessions: int = 256
    call_timeout_s: float = 30.0
    """Longest a game constructor, reset, step or close may take."""
    idle_ttl_s: float = 600.0
    """A session untouched for this long is closed by `reap_idle`."""
    max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS


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
    game: Game
    job_id: str
    request_id: str
    request_key: str
    last_used: float
    state: SessionState = SessionState.AWAITING_RESET
    note: str = "no episode yet"
    """Why the session is AWAITING_RESET or BROKEN, for FAILED_PRECONDITION messages."""
    steps: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True, kw_only=True)
class ResetOutcome:
    """What a reset answers: the prompts and reset()'s observation."""

    system_prompt: str
    initial_user_message: str
    observation: str
    info: dict[str, Any] = field(default_factory=dict)


class SessionManager:
    """All open sessions of one EnvHost."""

    def __init__(self, catalog: GameCatalog, limits: SessionLimits = SessionLimits(), *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.catalog = catalog
        self.limits = limits
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self.by_request_id: dict[str, str] = {}
        self.opening = 0

    # -- open / close -----------------------------------------------------------------------

    async def open(self, env_name: str, config: Mapping[str, Any], *, job_id: str = "",
                   request_id: str = "") -> Session:
        """A new session of `env_name` built with `config`; a retried request_id returns the
        session it opened before."""
        spec = self.catalog.get(_required("env_name", env_name))
        key = _request_key(env_name, config, job_id)
        existing = self._session_for_request(request_id, key)
        if existing is not None:
            return existing
        self._reserve_slot()
        try:
            game = await self._construct(spec, dict(config))
        except (EnvironmentFailure, EnvironmentTimeout, InvalidArgument) as error:
            count_env_error(spec.name, "construct", _error_kind(error))
            raise
        finally:
            self.opening -= 1
        return await self._register(spec, game, job_id=job_id, request_id=request_id, key=key)

    async def close(self, session_id: str) -> int:
        """Close a session (its game's close() runs; errors are logged); the steps it served."""
        session = self.sessions.pop(_required("session_id", session_id), None)
        if session is None:
            raise SessionNotFound(f"session_id: no open session {session_id!r}")
        self.by_request_id.pop(session.request_id, None)
        OPEN_SESSIONS.labels(env=session.spec.name).dec()
        async with session.lock:
            if session.state is not SessionState.BROKEN:  # a broken game may still be running
                await self._close_game(session)
            session.state = SessionState.CLOSED
        log.info("session_closed", session_id=session_id, env_name=session.spec.name, steps=session.steps)
        return session.steps

    async def reap_idle(self) -> list[str]:
        """Close sessions idle longer than the TTL (not those in a call); their ids."""
        cutoff = self.clock() - self.limits.idle_ttl_s
        idle = [s.session_id for s in self.sessions.values()
                if s.last_used < cutoff and not s.lock.locked()]
        for session_id in idle:
            log.info("session_idle_expired", session_id=session_id, ttl_s=self.limits.idle_ttl_s)
            with contextlib.suppress(SessionNotFound):  # closed meanwhile by its client
                await self.close(session_id)
        return idle

    async def close_all(self) -> None:
        for session_id in list(self.sessions):
            await self.close(session_id)

    # -- play -------------------------------------------------------------------------------

    async def reset(self, session_id: str, kwargs: Mapping[str, Any], *,
                    seed: int | None = None) -> ResetOutcome:
        """Start an episode: reset(**kwargs), plus `seed=` when given and accepted."""
        session = self._get(session_id)
        async with session.lock:
            self._require_not_broken(session)
            arguments = _reset_arguments(session, kwargs, seed)
            call = _reset_call(session.game, arguments, is_async=session.spec.is_async,
                               max_chars=self.limits.max_observation_chars)
            outcome = await self._game_call(session, "reset()", call, invalid=(GameConfigError,))
            session.state, session.note = SessionState.PLAYING, ""
            return outcome

    async def step(self, session_id: str, action: str, *, seat: str = "") -> StepResult:
        """Apply `action`; FAILED_PRECONDITION unless an episode is in progress."""
        session = self._get(session_id)
        async with session.lock:
            self._require_playing(session)
            call = _step_call(session.game, action, _seat_kwargs(session.spec, seat),
                              is_async=session.spec.is_async, max_chars=self.limits.max_observation_chars)
            with STEP_SECONDS.labels(env=session.spec.name).time():
                result = await self._game_call(session, "step()", call)
            STEPS.labels(env=session.spec.name).inc()
            session.steps += 1
            session.state = SessionState.DONE if result.done else SessionState.PLAYING
            return result

    # -- internals --------------------------------------------------------------------------

    def _get(self, session_id: str) -> Session:
        session = self.sessions.get(_required("session_id", session_id))
        if session is None:
            raise SessionNotFound(f"session_id: no open session {session_id!r}")
        session.last_used = self.clock()
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

    async def _construct(self, spec: GameSpec, config: dict[str, Any]) -> Game:
        _check_arguments(spec.cls, config, "config", f"{spec.cls.__name__}()")
        return await call_game(lambda: spec.cls(**config), in_thread=not spec.is_async,
                               timeout=self.limits.call_timeout_s, what=f"{spec.cls.__name__}()",
                               invalid=(GameConfigError,))

    async def _register(self, spec: GameSpec, game: Game, *, job_id: str, request_id: str,
                        key: str) -> Session:
        if request_id in self.by_request_id:  # a concurrent retry won the race: keep its session
            await call_game(game.close, in_thread=not spec.is_async, timeout=self.limits.call_timeout_s,
                            what="close()")
            return self._session_for_request(request_id, key)  # type: ignore[return-value]
        session = Session(session_id=uuid.uuid4().hex, spec=spec, game=game, job_id=job_id,
                          request_id=request_id, request_key=key, last_used=self.clock())
        self.sessions[session.session_id] = session
        OPEN_SESSIONS.labels(env=spec.name).inc()
        if request_id:
            self.by_request_id[request_id] = session.session_id
        log.info("session_opened", session_id=session.session_id, env_name=spec.name, job_id=job_id)
        return session

    async def _game_call(self, session: Session, method: str, fn: Callable[[], Any],
                         invalid: tuple[type[Exception], ...] = ()) -> Any:
        what = f"{type(session.game).__name__}.{method}"
        try:
            return await call_game(fn, in_thread=not session.spec.is_async,
                                   timeout=self.limits.call_timeout_s, what=what, invalid=invalid)
        except NotYourTurnError:
            raise  # the caller's turn order, not the game, was wrong: the episode goes on
        except InvalidArgument as error:
            _await_reset(session, "the last reset was rejected")
            _count_error(session, method, error)
            raise
        except EnvironmentTimeout as error:
            _break(session, f"{what} timed out; the game may still be running")
            _count_error(session, method, error)
            raise
        except EnvironmentFailure as error:
            _await_reset(session, f"the episode failed: {error.message}")
            log.warning("environment_failed", session_id=session.session_id, error=error.message,
                        traceback=error.traceback)
            _count_error(session, method, error)
            raise
        except asyncio.CancelledError as error:
            _break(session, f"{what} was cancelled while the game ran")
            _count_error(session, method, error)
            raise

    async def _close_game(self, session: Session) -> None:
        try:
            await call_game(session.game.close, in_thread=not session.spec.is_async,
                            timeout=self.limits.call_timeout_s, what="close()")
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


def _reset_call(game: Game, arguments: dict[str, Any], *, is_async: bool,
                max_chars: int) -> Callable[[], Any]:
    """reset() then the prompts, as one game call, each checked against the size limit."""
    def outcome(observation: object) -> ResetOutcome:
        return ResetOutcome(
            system_prompt=check_observation(game.get_system_prompt(), "get_system_prompt()", max_chars),
            initial_user_message=check_observation(game.get_initial_user_message(),
                                                   "get_initial_user_message()", max_chars),
            observation=check_observation(observation, "reset()", max_chars))

    async def run_async() -> ResetOutcome:
        return outcome(await game.reset(**arguments))  # type: ignore[misc]

    return run_async if is_async else lambda: outcome(game.reset(**arguments))


def _step_call(game: Game, action: str, seat_kwargs: dict[str, str], *, is_async: bool,
               max_chars: int) -> Callable[[], Any]:
    async def run_async() -> StepResult:
        return check_step_result(await game.step(action, **seat_kwargs), "step()", max_chars)  # type: ignore[misc]

    return run_async if is_async else lambda: check_step_result(
        game.step(action, **seat_kwargs), "step()", max_chars)


def _reset_arguments(session: Session, kwargs: Mapping[str, Any], seed: int | None) -> dict[str, Any]:
    """kwargs plus `seed=` when given and reset() takes it (a seed is a hint: games without
    one ignore it); InvalidArgument when reset() does not accept the kwargs."""
    spec, arguments = session.spec, dict(kwargs)
    if seed is not None and spec.reset_accepts("seed"):
        arguments.setdefault("seed", seed)
    _check_arguments(session.game.reset, arguments, "kwargs", f"{spec.cls.__name__}.reset()")
    return arguments


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
    if isinstance(error, EnvironmentTimeout):
        return "timeout"
    if isinstance(error, InvalidArgument):
        return "invalid_argument"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    return "failed"


def _count_error(session: Session, method: str, error: BaseException) -> None:
    """Count a failed reset()/step() of `session`'s game."""
    count_env_error(session.spec.name, method.removesuffix("()"), _error_kind(error))


def _break(session: Session, note: str) -> None:
    session.state, session.note = SessionState.BROKEN, note


def _await_reset(session: Session, note: str) -> None:
    session.state, session.note = SessionState.AWAITING_RESET, note
