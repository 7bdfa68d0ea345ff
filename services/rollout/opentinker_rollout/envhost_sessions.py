"""EnvHost sessions kept open between episodes, so an episode costs one Reset instead of
OpenSession + Reset + CloseSession (domain code: sessions are opened through a callable).

A `SessionScope` names who may reuse a session: the EnvHost address, the game and its config,
and the credentials its calls carry (the job id and the job's attempt token, or the Rollout's own
key for a call without a job). Only a caller of the same scope ever gets a parked session back:
never another job, another attempt of the same job, or another tenant. Calls without a job get
a scope of their own (`call_nonce`), closed when the call ends.

Each episode takes a session (a parked one, else a newly opened one), plays, and gives it back:
`PooledSession` parks it again when every call on it succeeded, and closes it otherwise (an
EnvironmentFailure, a game error, a call cut by a timeout or a cancel: a failed session is
never reused). Resetting a parked session starts the next episode with that episode's own kwargs
and seed, exactly as on a fresh one, so a game whose reset() fully restarts it plays the same.

Parked sessions are closed when they have been idle for `idle_ttl_s`, when the same job opens a
session with another attempt token (the old attempt is over), on `job_stopped`, and on `close`
(the Rollout stopping). At most `max_parked` sessions are parked per scope; more are closed. An
EnvHost that refuses an open as full (RESOURCE_EXHAUSTED) gets this Rollout's sessions parked
there by other scopes closed (oldest first, as many as opens failed), and the open is tried once
more: parked sessions never keep another job out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from opentinker_rollout.environment import EnvironmentFailure, ResetResult, StepOutcome

log = structlog.get_logger(__name__)

DEFAULT_IDLE_TTL_S = 300.0
"""Longer than a job's update phase between two rollout phases, shorter than the EnvHost's own
idle TTL (600 s by default)."""
DEFAULT_MAX_PARKED = 256
"""As many as an EnvHost holds by default (OPENTINKER_ENVHOST_MAX_SESSIONS)."""
CLOSE_TIMEOUT_S = 5.0


class OpenableSession(Protocol):
    """An EnvHost session as the pool needs it (`envhost_interact.InteractSession`)."""

    async def open(self) -> None: ...
    async def reset(self, kwargs: Mapping[str, Any], seed: int) -> ResetResult: ...
    async def step(self, action: str, *, truncated: bool = False) -> StepOutcome: ...
    async def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class SessionScope:
    """Who may reuse a session: everything that decides what a fresh open would give, and the
    credentials its calls carry."""

    address: str
    env_name: str
    config_json: str
    job_id: str = ""
    job_token: str = field(default="", repr=False)
    call_nonce: str = ""
    """Set for calls without a job: their sessions live for the call only."""

    @classmethod
    def of(cls, *, address: str, env_name: str, config: Mapping[str, Any], job_id: str,
           job_token: str) -> SessionScope:
        return cls(address=address, env_name=env_name, job_id=job_id, job_token=job_token,
                   config_json=json.dumps(dict(config), sort_keys=True, default=str),
                   call_nonce="" if job_id else uuid.uuid4().hex)

    @property
    def per_call(self) -> bool:
        return bool(self.call_nonce)


@dataclass(kw_only=True)
class _Parked:
    session: OpenableSession
    since: float


class SessionPools:
    """Parked sessions by scope; one per Rollout process (see the module docstring)."""

    def __init__(self, *, idle_ttl_s: float = DEFAULT_IDLE_TTL_S, max_parked: int = DEFAULT_MAX_PARKED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_ttl_s = idle_ttl_s
        self.max_parked = max_parked
        self.clock = clock
        self._parked: dict[SessionScope, list[_Parked]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None

    def take_parked(self, scope: SessionScope) -> OpenableSession | None:
        """The most recently parked session of `scope`, if any."""
        self._close_other_attempts(scope)
        parked = self._parked.get(scope)
        return parked.pop().session if parked else None

    async def take_new(self, scope: SessionScope, make: Callable[[], OpenableSession]) -> OpenableSession:
        """A newly opened session (`make()`, then open)."""
        self._close_other_attempts(scope)
        try:
            session = await self._open(make)
        except EnvironmentFailure as failure:
            if failure.status != "RESOURCE_EXHAUSTED" or not await self._evict_one(scope):
                raise
            session = await self._open(make)
        return session

    def give_back(self, scope: SessionScope, session: OpenableSession, *, reusable: bool) -> None:
        """Park `session` for the scope's next episode, or close it (in the background) when it
        failed or the scope has enough parked. Never awaits: safe in a cancelled episode."""
        if reusable and len(self._parked.get(scope, ())) < self.max_parked:
            self._parked.setdefault(scope, []).append(_Parked(session=session, since=self.clock()))
            self._start_reaper()
        else:
            self._close_in_background(session)

    async def end_call(self, scope: SessionScope) -> None:
        """A call ended: a per-call scope's sessions are closed (a job's stay parked)."""
        if scope.per_call:
            await self._close_scopes([scope])

    async def job_stopped(self, job_id: str) -> None:
        """Close every parked session of `job_id` (it finished, or moved off this Rollout)."""
        await self._close_scopes([s for s in self._parked if job_id and s.job_id == job_id])

    async def reap_idle(self) -> int:
        """Close sessions parked for longer than the idle TTL; how many."""
        cutoff = self.clock() - self.idle_ttl_s
        stale = []
        for scope, parked in list(self._parked.items()):
            stale += [p.session for p in parked if p.since <= cutoff]
            self._parked[scope] = [p for p in parked if p.since > cutoff]
            if not self._parked[scope]:
                del self._parked[scope]
        await _close_all(stale)
        return len(stale)

    async def close(self) -> None:
        """Close every parked session, and wait for closes under way (the Rollout is stopping)."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        await self._close_scopes(list(self._parked))
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    # -- internals --------------------------------------------------------------------------

    async def _open(self, make: Callable[[], OpenableSession]) -> OpenableSession:
        session = make()
        await session.open()
        return session

    async def _evict_one(self, scope: SessionScope) -> bool:
        """Close the oldest session parked on `scope`'s EnvHost by another scope; False if none."""
        candidates = [(p.since, other, p) for other, parked in self._parked.items()
                      if other.address == scope.address and other != scope for p in parked]
        if not candidates:
            return False
        _, other, oldest = min(candidates, key=lambda c: c[0])
        self._parked[other].remove(oldest)
        if not self._parked[other]:
            del self._parked[other]
        log.info("envhost_parked_session_evicted", address=scope.address, for_job=scope.job_id[:128])
        await _close_quietly(oldest.session)
        return True

    def _close_other_attempts(self, scope: SessionScope) -> None:
        """A job calling with another attempt token: its earlier attempt's sessions go."""
        if not scope.job_id:
            return
        for other in [s for s in self._parked if s.job_id == scope.job_id and s.job_token != scope.job_token]:
            log.info("envhost_sessions_of_replaced_attempt_closed", job_id=scope.job_id[:128],
                     sessions=len(self._parked[other]))
            for parked in self._parked.pop(other):
                self._close_in_background(parked.session)

    async def _close_scopes(self, scopes: list[SessionScope]) -> None:
        sessions = [p.session for scope in scopes for p in self._parked.pop(scope, [])]
        await _close_all(sessions)

    def _close_in_background(self, session: OpenableSession) -> None:
        task = asyncio.get_running_loop().create_task(_close_quietly(session))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_while_parked())

    async def _reap_while_parked(self) -> None:
        """Reap every quarter TTL while anything is parked; then stop (restarted on the next park)."""
        while self._parked:
            await asyncio.sleep(max(0.05, self.idle_ttl_s / 4))
            await self.reap_idle()


STALE_SESSION_STATUSES = frozenset({"NOT_FOUND", "UNAVAILABLE", "CANCELLED"})
"""What a parked session's reset answers when the session, not the game, is gone: the EnvHost
closed it (idle TTL), restarted, or the session's stream broke."""


class PooledSession:
    """One episode's `EnvironmentSession` over a session taken from `pools`: open takes one,
    close gives it back (parked only if every call on it succeeded). A parked session whose
    reset finds it gone (the EnvHost closed it meanwhile, restarted, or its stream broke:
    `STALE_SESSION_STATUSES`) is closed and the reset is tried once more on a new session:
    nothing of the episode had happened yet. A game that fails its reset is not retried."""

    def __init__(self, pools: SessionPools, scope: SessionScope, make: Callable[[], OpenableSession]) -> None:
        self.pools = pools
        self.scope = scope
        self.make = make
        self.session: OpenableSession | None = None
        self.reusable = True
        self.was_parked = False

    async def open(self) -> None:
        self.session = self.pools.take_parked(self.scope)
        self.was_parked = self.session is not None
        if self.session is None:
            self.session = await self._guarded(self.pools.take_new(self.scope, self.make))

    async def reset(self, kwargs: Mapping[str, Any], seed: int) -> ResetResult:
        try:
            return await self._guarded(self._open_session().reset(kwargs, seed))
        except EnvironmentFailure as failure:
            if not self.was_parked or failure.status not in STALE_SESSION_STATUSES:
                raise  # a game that failed its reset fails the episode, as on a fresh session
            log.info("envhost_parked_session_replaced", error=str(failure))
            await self.close()
            self.reusable, self.was_parked = True, False
            self.session = await self._guarded(self.pools.take_new(self.scope, self.make))
            return await self._guarded(self.session.reset(kwargs, seed))

    async def step(self, action: str, *, truncated: bool = False) -> StepOutcome:
        return await self._guarded(self._open_session().step(action, truncated=truncated))

    async def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            self.pools.give_back(self.scope, session, reusable=self.reusable)

    def _open_session(self) -> OpenableSession:
        if self.session is None:
            raise RuntimeError("the session is not open")
        return self.session

    async def _guarded(self, call: Awaitable[Any]) -> Any:
        """Any failure (an EnvironmentFailure, a timeout or cancel cutting the call) makes the
        session unfit for another episode."""
        try:
            return await call
        except BaseException:
            self.reusable = False
            raise


async def _close_quietly(session: OpenableSession) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await session.close()


async def _close_all(sessions: list[OpenableSession]) -> None:
    if sessions:
        await asyncio.gather(*(_close_quietly(s) for s in sessions))

