"""Client sessions: one per `ServiceClient`, kept alive by the SDK's heartbeat every 10 s.

A session that misses heartbeats for `timeout_seconds` ends, and with it its training runs (their
SESSION jobs finish) and its samplers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from opentinker_gateway.errors import NotFound


@dataclass
class ClientSession:
    session_id: str
    tenant_id: str
    tenant_key: str
    sdk_version: str
    tags: tuple[str, ...] = ()
    user_metadata: dict = field(default_factory=dict)
    last_heartbeat: float = field(default_factory=time.monotonic)
    model_count: int = 0
    sampler_count: int = 0


class ClientSessions:
    def __init__(self, *, timeout_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_seconds = timeout_seconds
        self.clock = clock
        self._sessions: dict[str, ClientSession] = {}

    def create(self, tenant_id: str, tenant_key: str, *, sdk_version: str, tags: tuple[str, ...],
               user_metadata: dict) -> ClientSession:
        session = ClientSession(session_id=f"sess-{uuid.uuid4().hex[:20]}", tenant_id=tenant_id,
                                tenant_key=tenant_key, sdk_version=sdk_version, tags=tags,
                                user_metadata=user_metadata, last_heartbeat=self.clock())
        self._sessions[session.session_id] = session
        return session

    def get(self, tenant_id: str, session_id: str) -> ClientSession:
        session = self._sessions.get(session_id)
        if session is None or session.tenant_id != tenant_id:
            raise NotFound(f"no session {session_id!r} (ended, or not yours)")
        return session

    def heartbeat(self, tenant_id: str, session_id: str) -> ClientSession:
        session = self.get(tenant_id, session_id)
        session.last_heartbeat = self.clock()
        return session

    def finish(self, tenant_id: str, session_id: str) -> ClientSession:
        session = self.get(tenant_id, session_id)
        del self._sessions[session_id]
        return session

    def expired(self) -> list[ClientSession]:
        """Remove and return the sessions whose heartbeat is overdue."""
        now = self.clock()
        gone = [s for s in self._sessions.values() if now - s.last_heartbeat > self.timeout_seconds]
        for session in gone:
            del self._sessions[session.session_id]
        return gone

    def __len__(self) -> int:
        return len(self._sessions)
