"""Reading a job's event stream: replay after a sequence, then follow live with XREAD BLOCK.

Blocking reads use their own client (`blocking_client`, created without a socket timeout):
redis-py's default 5 s socket timeout would otherwise cut an XREAD BLOCK of the same length.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio

from opentinker.core.redis_store import Keys
from opentinker_scheduler.events import JobEvent, decode_entry

REPLAY_BATCH = 500


@dataclass(frozen=True, kw_only=True)
class EventLog:
    client: redis.asyncio.Redis
    blocking_client: redis.asyncio.Redis
    keys: Keys
    block_ms: int

    async def after(self, job_id: str, sequence: int, *, count: int = REPLAY_BATCH) -> list[JobEvent]:
        """Up to `count` stored events with a sequence greater than `sequence`, in order."""
        entries = await self.client.xrange(self.keys.job_events(job_id), min=f"{sequence + 1}-0",
                                           count=count)
        return [decode_entry(job_id, entry_id, fields) for entry_id, fields in entries]

    async def replay(self, job_id: str, sequence: int) -> AsyncIterator[JobEvent]:
        """Every stored event after `sequence`."""
        while batch := await self.after(job_id, sequence):
            for event in batch:
                yield event
            sequence = batch[-1].sequence

    async def wait_after(self, job_id: str, sequence: int) -> list[JobEvent]:
        """Events after `sequence`, blocking up to block_ms for the first; [] on timeout."""
        key = self.keys.job_events(job_id)
        reply = await self.blocking_client.xread({key: f"{sequence}-0"}, count=REPLAY_BATCH,
                                                 block=self.block_ms)
        return [decode_entry(job_id, entry_id, fields)
                for _, entries in reply for entry_id, fields in entries]
