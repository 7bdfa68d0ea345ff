"""One Redis reader for every followed job: WatchJob streams share it, whatever their number.

A single blocking XREAD covers the event streams of every job someone follows in this process
and hands each new batch (decoded once) to every follower of that job. So 300 watchers of one
job, or of 60 jobs, hold one Redis connection, not 300 (issue 20: about 88 per-watcher XREADs
used up the client's pool and every tenant's watch failed).

Each follower has a bounded queue. One that does not keep up (a slow client) is never waited
for: once its queue would overflow it is emptied and the follower marked `behind`, and it reads
what it missed from Redis by sequence (events are stored; nothing is lost, nothing is kept in
memory for it). A job newly followed wakes the XREAD in flight, so it is read from at once: the
read also covers this hub's own wake stream, and an XADD there (one entry, kept at most
WAKE_TTL_MS) ends it. Cancelling the read instead would drop its connection, and at 80 new
watchers a second every read would reconnect. An unfollowed job is simply left out of the next
read.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis.asyncio
import structlog

from opentinker_runtime.core.redis_store import Keys
from opentinker_scheduler.events import JobEvent, decode_entry

log = structlog.get_logger(__name__)

READ_BATCH = 500
WAKE_TTL_MS = 60_000
"""How long a hub's wake stream outlives its last wake (it is deleted when the hub stops)."""


@dataclass(eq=False, kw_only=True)
class Follower:
    """One live stream's place in the hub: the events handed to it, not yet taken."""

    job_id: str
    limit: int
    pending: deque[JobEvent] = field(default_factory=deque)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    behind: bool = False
    """Events were missed (dropped from a full queue, or read before this follower joined):
    read them from Redis by sequence before taking more."""
    failure: BaseException | None = None

    def offer(self, events: Sequence[JobEvent]) -> None:
        if len(self.pending) + len(events) > self.limit:
            self.pending.clear()
            self.behind = True
        else:
            self.pending.extend(events)
        self.arrived.set()

    def fail(self, error: BaseException) -> None:
        self.failure = error
        self.arrived.set()

    def take(self) -> list[JobEvent]:
        taken = list(self.pending)
        self.pending.clear()
        return taken


class EventHub:
    """Fans the live events of followed jobs out to their followers (see the module doc)."""

    def __init__(self, client: redis.asyncio.Redis, *, keys: Keys, block_ms: int, queue_events: int) -> None:
        self.client, self.keys, self.block_ms, self.queue_events = client, keys, block_ms, queue_events
        self._followers: dict[str, set[Follower]] = {}
        self._positions: dict[str, int] = {}
        """Per followed job: the last sequence the reader has seen (it reads after it)."""
        self._reader: asyncio.Task[None] | None = None
        self._wake_key = keys.event_hub_wake(uuid.uuid4().hex)
        self._wake_position = "0-0"
        self._reading: set[str] | None = None
        """The jobs the XREAD in flight covers (None: no read in flight)."""
        self._woken = False
        """A wake was sent for the read in flight."""
        self._waking: set[asyncio.Task[None]] = set()

    @property
    def followers(self) -> int:
        return sum(len(group) for group in self._followers.values())

    def follow(self, job_id: str, after: int) -> Follower:
        """Start receiving the job's events read from now on (`after`: where a new reader starts)."""
        follower = Follower(job_id=job_id, limit=self.queue_events)
        group = self._followers.setdefault(job_id, set())
        if not group:
            self._positions[job_id] = after
        group.add(follower)
        if self._reading is not None and job_id not in self._reading:
            self._wake()
        if self._positions[job_id] > after:  # the reader is past `after`: read the rest from Redis
            follower.behind = True
            follower.arrived.set()
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read_forever(), name="event-hub")
        return follower

    def leave(self, follower: Follower) -> None:
        """Stop handing events to `follower` (synchronous: safe in any `finally`)."""
        group = self._followers.get(follower.job_id)
        if group is None:
            return
        group.discard(follower)
        if not group:
            del self._followers[follower.job_id]
            self._positions.pop(follower.job_id, None)
            if not self._followers and self._reading is not None:
                self._wake()  # nothing left to follow: end the read in flight

    async def _read_forever(self) -> None:
        try:
            while self._followers:
                reply = await self._read()
                if reply:
                    self._deliver(reply)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - every follower gets it (e.g. Redis down)
            log.warning("event_hub_read_failed", error=repr(error), jobs=len(self._followers))
            for group in self._followers.values():
                for follower in group:
                    follower.fail(error)
        finally:
            self._reading = None

    async def _read(self) -> list:
        """One XREAD BLOCK over every followed job and this hub's wake stream (what it read of
        the wake stream is noted and left out)."""
        streams = {self.keys.job_events(job_id): f"{position}-0" for job_id, position in self._positions.items()}
        streams[self._wake_key] = self._wake_position
        self._reading, self._woken = set(self._positions), False
        try:
            reply = await self.client.xread(streams, count=READ_BATCH, block=self.block_ms)
        finally:
            self._reading = None
        wake = self._wake_key.encode()
        for stream, entries in reply or ():
            if (stream if isinstance(stream, bytes) else stream.encode()) == wake and entries:
                last = entries[-1][0]
                self._wake_position = last.decode() if isinstance(last, bytes) else last
        return reply or []

    def _wake(self) -> None:
        """End the read in flight (once per read): XADD to the wake stream, in a task."""
        if self._woken:
            return
        self._woken = True
        task = asyncio.get_running_loop().create_task(self._send_wake())
        self._waking.add(task)
        task.add_done_callback(self._waking.discard)

    async def _send_wake(self) -> None:
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xadd(self._wake_key, {"w": "1"}, maxlen=1, approximate=False)
                pipe.pexpire(self._wake_key, WAKE_TTL_MS)
                await pipe.execute()
        except Exception as error:  # noqa: BLE001 - the read then ends at its block time (or fails too)
            log.warning("event_hub_wake_failed", error=repr(error))

    def _deliver(self, reply: list) -> None:
        job_of = {self.keys.job_events(job_id).encode(): job_id for job_id in self._followers}
        for stream, entries in reply:
            job_id = job_of.get(stream if isinstance(stream, bytes) else stream.encode())
            group = self._followers.get(job_id) if job_id else None
            if not group or not entries:
                continue  # no longer followed (it left while the read was in flight)
            events = [decode_entry(job_id, entry_id, fields) for entry_id, fields in entries]
            self._positions[job_id] = max(self._positions.get(job_id, 0), events[-1].sequence)
            for follower in group:
                follower.offer(events)
