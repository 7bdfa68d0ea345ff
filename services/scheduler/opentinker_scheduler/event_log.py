"""Reading a job's event stream: replay after a sequence, then follow live through the EventHub.

Live events come from the hub's one blocking reader (on `blocking_client`, created without a
socket timeout: redis-py's default 5 s socket timeout would cut an XREAD BLOCK of that length),
shared by every follower in this process; stored events are read with XRANGE on `client`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import redis.asyncio

from opentinker_runtime.core.redis_store import Keys
from opentinker_scheduler.config import SchedulerConfig
from opentinker_scheduler.event_hub import EventHub, Follower
from opentinker_scheduler.events import JobEvent, decode_entry
from opentinker_scheduler.watch_streams import LiveStreams

REPLAY_BATCH = 500


@dataclass(frozen=True, kw_only=True)
class EventLog:
    client: redis.asyncio.Redis
    blocking_client: redis.asyncio.Redis
    keys: Keys
    block_ms: int
    queue_events: int = SchedulerConfig.watch_queue_events
    """Live events one follower may have waiting; past that it re-reads them from Redis."""
    streams: LiveStreams = field(default_factory=lambda: LiveStreams(
        tenant_cap=SchedulerConfig.max_watch_streams_per_tenant, admin_cap=SchedulerConfig.max_admin_watch_streams))
    """Live WatchJob streams per tenant, under their caps."""
    hub: EventHub = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hub", EventHub(self.blocking_client, keys=self.keys, block_ms=self.block_ms,
                                                 queue_events=self.queue_events))

    async def after(self, job_id: str, sequence: int, *, count: int = REPLAY_BATCH) -> list[JobEvent]:
        """Up to `count` stored events with a sequence greater than `sequence`, in order."""
        entries = await self.client.xrange(self.keys.job_events(job_id), min=f"{sequence + 1}-0",
                                           count=count)
        return [decode_entry(job_id, entry_id, fields) for entry_id, fields in entries]

    async def newest_first(self, job_id: str, *, before: int = 0) -> AsyncIterator[JobEvent]:
        """Every stored event (with a sequence below `before`, when given), the newest first (read
        in batches, so a caller may stop early)."""
        top = f"({before}-0" if before > 0 else "+"
        while entries := await self.client.xrevrange(self.keys.job_events(job_id), max=top, count=REPLAY_BATCH):
            for entry_id, fields in entries:
                yield decode_entry(job_id, entry_id, fields)
            if len(entries) < REPLAY_BATCH:
                return
            top = f"({entries[-1][0].decode()}"

    def replay(self, job_id: str, sequence: int) -> AsyncIterator[JobEvent]:
        """Every stored event after `sequence`."""
        return self._stored_after(job_id, sequence)

    async def replay_from(self, job_id: str, first: Sequence[JobEvent], *, count: int) -> AsyncIterator[JobEvent]:
        """`first` (a batch of up to `count` stored events, read already), then every stored event after it."""
        for event in first:
            yield event
        if len(first) == count:
            async for event in self._stored_after(job_id, first[-1].sequence):
                yield event

    async def _stored_after(self, job_id: str, sequence: int) -> AsyncIterator[JobEvent]:
        while batch := await self.after(job_id, sequence):
            for event in batch:
                yield event
            if len(batch) < REPLAY_BATCH:
                return  # that was the last of them: no empty read to find out
            sequence = batch[-1].sequence

    async def follow(self, job_id: str, sequence: int) -> AsyncIterator[JobEvent]:
        """Every event after `sequence`, stored or yet to come, in order without gaps; endless.

        Whatever the hub did not hand over (events stored before this follower joined, or
        dropped because it fell behind) is read from Redis by sequence."""
        follower = self.hub.follow(job_id, sequence)
        try:
            while True:
                await follower.arrived.wait()
                follower.arrived.clear()
                async for event in self._next_events(follower, sequence):
                    yield event
                    sequence = event.sequence
        finally:
            self.hub.leave(follower)

    async def _next_events(self, follower: Follower, sequence: int) -> AsyncIterator[JobEvent]:
        if follower.failure is not None:
            raise follower.failure
        if follower.behind:
            follower.behind = False
            async for event in self._stored_after(follower.job_id, sequence):
                yield event
                sequence = event.sequence
        for event in follower.take():
            if event.sequence <= sequence:
                continue  # already read from Redis
            if event.sequence > sequence + 1:  # handed over while this follower was re-reading
                async for stored in self._stored_after(follower.job_id, sequence):
                    yield stored
                    sequence = stored.sequence
                continue
            yield event
            sequence = event.sequence
