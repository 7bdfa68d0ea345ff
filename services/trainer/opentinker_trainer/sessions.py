"""The open sessions of this Trainer, and the rules every call goes through.

Per session one asyncio lock serialises calls; the torch work runs in a worker thread so the
event loop stays responsive, and the lock is held until that thread finishes even when the
caller gives up. Per job the highest fencing token seen is kept: a lower one is refused
(StaleFencingError). A request_id makes a call apply once: its result is remembered (per
session, per kind of call) and a retry gets the same result; the same id with a different
request is refused (RequestIdReusedError).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from opentinker_trainer.metrics import ACTIVE_SESSIONS
from opentinker_trainer.config import Lease, SessionSpec
from opentinker_trainer.errors import (RequestIdReusedError, SessionNotFoundError,
                                       StaleFencingError, ValidationError)
from opentinker_trainer.session import SessionView, TrainingSession, create_session

T = TypeVar("T")
REMEMBERED_REQUESTS = 32  # per session; results may hold a whole batch of logprobs


@dataclass(frozen=True, kw_only=True)
class RequestKey:
    """A call's request_id and a fingerprint of its content (e.g. a hash of the request)."""

    kind: str
    request_id: str
    fingerprint: str = ""


class RequestMemory:
    """The latest results by request key, bounded (oldest forgotten first)."""

    def __init__(self, capacity: int = REMEMBERED_REQUESTS) -> None:
        self.capacity = capacity
        self._results: OrderedDict[tuple[str, str], tuple[str, Any]] = OrderedDict()

    def lookup(self, key: RequestKey | None) -> tuple[bool, Any]:
        """(True, result) when `key` was seen; RequestIdReusedError on a different fingerprint."""
        if key is None or not key.request_id or (key.kind, key.request_id) not in self._results:
            return False, None
        fingerprint, result = self._results[(key.kind, key.request_id)]
        if fingerprint != key.fingerprint:
            raise RequestIdReusedError(f"request_id {key.request_id!r} was already used for a "
                                       f"different {key.kind} request")
        return True, result

    def remember(self, key: RequestKey | None, result: Any) -> None:
        if key is None or not key.request_id:
            return
        self._results[(key.kind, key.request_id)] = (key.fingerprint, result)
        while len(self._results) > self.capacity:
            self._results.popitem(last=False)


class _Entry:
    """A session plus what the registry keeps for it."""

    def __init__(self, session: TrainingSession) -> None:
        self.session = session
        self.lock = asyncio.Lock()
        self.requests = RequestMemory()


class SessionRegistry:
    """Sessions keyed by session_id; fencing tokens keyed by job_id."""

    def __init__(self, *, checkpoint_root: Path, device: str = "cpu",
                 device_ids: tuple[str, ...] = ("cpu:0",)) -> None:
        self.checkpoint_root = Path(checkpoint_root)
        self.device = device
        self.device_ids = device_ids
        self._entries: dict[str, _Entry] = {}
        self._highest_token: dict[str, int] = {}
        self._create_lock = asyncio.Lock()
        self._created = RequestMemory()

    async def create(self, spec: SessionSpec, *, lease: Lease, device_ids: Sequence[str] = (),
                     request: RequestKey | None = None) -> SessionView:
        """Open a session on `device_ids` (default: the first device; several = data-parallel).

        A retried request_id returns the session it created.
        """
        self.check_fencing(lease)
        devices = self.session_devices(device_ids)
        async with self._create_lock:
            seen, session_id = self._created.lookup(request)
            if seen and session_id in self._entries:
                return self._entries[session_id].session.view()
            session = await _in_thread(lambda: create_session(
                f"sess-{uuid.uuid4().hex[:12]}", spec, checkpoint_root=self.checkpoint_root,
                device=self.device, device_ids=devices))
            self._entries[session.session_id] = _Entry(session)
            ACTIVE_SESSIONS.inc()
            self._created.remember(request, session.session_id)
            return session.view()

    def session_devices(self, device_ids: Sequence[str]) -> tuple[str, ...]:
        """The devices a session asks for, checked against those this worker offers."""
        if not device_ids:
            return self.device_ids[:1]
        unknown = [d for d in device_ids if d not in self.device_ids]
        if unknown:
            raise ValidationError("device_ids", f"{unknown} are not devices of this worker; it "
                                  f"offers {list(self.device_ids)}")
        if len(set(device_ids)) != len(device_ids):
            raise ValidationError("device_ids", f"lists a device twice: {list(device_ids)}")
        return tuple(device_ids)

    def view(self, session_id: str) -> SessionView:
        return self._entry(session_id).session.view()

    async def run(self, session_id: str, lease: Lease | None, work: Callable[[TrainingSession], T],
                  *, request: RequestKey | None = None) -> T:
        """Run `work(session)` in a thread under the session's lock, after the lease checks."""
        entry = self._entry(session_id)
        async with entry.lock:
            if lease is not None:
                self.check_lease(entry.session, lease)
            return await _in_thread(lambda: self._once(entry, work, request))

    async def close(self, session_id: str, lease: Lease) -> SessionView:
        """Remove the session (after any call in flight) and report its final state."""
        entry = self._entry(session_id)
        async with entry.lock:
            self.check_lease(entry.session, lease)
            if self._entries.pop(session_id, None) is not None:
                ACTIVE_SESSIONS.dec()
            await _in_thread(entry.session.close)
            return entry.session.view()

    async def close_all(self) -> None:
        """Stop every session's replica processes (server shutdown)."""
        for session_id in list(self._entries):
            entry = self._entries.pop(session_id)
            ACTIVE_SESSIONS.dec()
            async with entry.lock:
                await _in_thread(entry.session.close)

    def check_lease(self, session: TrainingSession, lease: Lease) -> None:
        """The lease must belong to the session's job and carry a current fencing token."""
        if session.spec.job_id and lease.job_id != session.spec.job_id:
            raise ValidationError("lease.job_id", f"{lease.job_id!r} is not the job of session "
                                  f"{session.session_id} ({session.spec.job_id!r})")
        self.check_fencing(lease)

    def check_fencing(self, lease: Lease) -> None:
        """Refuse a token below the highest seen for the job; remember a higher one."""
        if not lease.job_id:
            return
        highest = self._highest_token.get(lease.job_id, 0)
        if lease.fencing_token < highest:
            raise StaleFencingError(lease.job_id, lease.fencing_token, highest)
        self._highest_token[lease.job_id] = lease.fencing_token

    def _entry(self, session_id: str) -> _Entry:
        if not session_id:
            raise ValidationError("session_id", "is required")
        entry = self._entries.get(session_id)
        if entry is None:
            raise SessionNotFoundError(session_id)
        return entry

    @staticmethod
    def _once(entry: _Entry, work: Callable[[TrainingSession], T], request: RequestKey | None) -> T:
        seen, result = entry.requests.lookup(request)
        if seen:
            return result
        result = work(entry.session)
        entry.requests.remember(request, result)
        return result


async def _in_thread(function: Callable[[], T]) -> T:
    """Run `function` in a worker thread; if the caller is cancelled, still wait for the
    thread to finish before returning control (so a lock held around this stays held)."""
    future = asyncio.ensure_future(asyncio.to_thread(function))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        raise
