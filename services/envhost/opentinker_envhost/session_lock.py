"""A session's lock: FIFO like asyncio.Lock, and takeable without awaiting.

Every call on a session holds its lock, so a client's pipelined reset and steps apply in the
order they arrived. The EnvHost's step fast path (`SessionManager.step_soon`) takes the lock in a
plain function call, when no one holds it or waits for it, and releases it from the callback
that delivers the step's result; everything else awaits it as before. A release hands the lock
straight to the oldest waiter, so a call arriving meanwhile cannot jump the queue.
"""

from __future__ import annotations

import asyncio
import collections


class SessionLock:
    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def locked(self) -> bool:
        return self._held

    def try_acquire(self) -> bool:
        """Take the lock now if it is free and no one waits for it."""
        if self._held or self._waiters:
            return False
        self._held = True
        return True

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed the lock, then cancelled before it ran: pass it on
            raise
        finally:
            if not waiter.done() or waiter.cancelled():
                _discard(self._waiters, waiter)

    def release(self) -> None:
        """Hand the lock to the oldest live waiter, or free it."""
        if not self._held:
            raise RuntimeError("SessionLock released while not held")
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the lock stays held: it is the waiter's now
                return
        self._held = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


def _discard(waiters: collections.deque[asyncio.Future[None]], waiter: asyncio.Future[None]) -> None:
    try:
        waiters.remove(waiter)
    except ValueError:
        pass
