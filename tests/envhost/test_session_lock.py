"""SessionLock: FIFO like asyncio.Lock, takeable without awaiting, handed straight to the oldest
waiter on release (so a call arriving meanwhile cannot jump the queue)."""

from __future__ import annotations

import asyncio

import pytest

from opentinker_envhost.session_lock import SessionLock


async def hold(lock: SessionLock, order: list[str], name: str) -> None:
    """Take the lock, note `name`, yield once, let go."""
    async with lock:
        order.append(name)
        await asyncio.sleep(0)


def test_try_acquire_takes_a_free_lock_only() -> None:
    lock = SessionLock()
    assert lock.try_acquire() and lock.locked()
    assert not lock.try_acquire()
    lock.release()
    assert not lock.locked() and lock.try_acquire()


def test_waiters_get_the_lock_in_arrival_order_and_newcomers_cannot_jump_the_queue() -> None:
    async def scenario() -> list[str]:
        lock, order = SessionLock(), []
        assert lock.try_acquire()
        waiting = [asyncio.create_task(hold(lock, order, f"w{i}")) for i in range(3)]
        await asyncio.sleep(0)  # all three wait now
        lock.release()  # handed to w0: still held
        assert lock.locked() and not lock.try_acquire(), "a newcomer took the lock from the queue"
        late = asyncio.create_task(hold(lock, order, "late"))
        await asyncio.gather(*waiting, late)
        assert not lock.locked()
        return order

    assert asyncio.run(scenario()) == ["w0", "w1", "w2", "late"]


def test_a_cancelled_waiter_leaves_the_queue_and_one_cancelled_after_the_handoff_passes_it_on() -> None:
    async def scenario() -> list[str]:
        lock, order = SessionLock(), []
        assert lock.try_acquire()
        first, second, third = (asyncio.create_task(hold(lock, order, n)) for n in ("first", "second", "third"))
        await asyncio.sleep(0)
        first.cancel()  # cancelled while waiting: it leaves the queue
        await asyncio.sleep(0)
        lock.release()  # to second
        second.cancel()  # handed the lock, cancelled before it ran: third gets it
        await asyncio.gather(first, second, third, return_exceptions=True)
        assert first.cancelled() and second.cancelled()
        assert not lock.locked()
        return order

    assert asyncio.run(scenario()) == ["third"]


def test_releasing_a_free_lock_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not held"):
        SessionLock().release()
