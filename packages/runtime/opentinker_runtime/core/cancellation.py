"""Cancellation that asyncio can lose, made to stick.

On Python 3.11 `asyncio.wait_for` returns the inner result when the outer task is cancelled at
the moment the inner awaitable finishes: the CancelledError is swallowed, and a loop built
on it ("wait for a wake-up or the interval, then go round again") never ends. Such loops call
`raise_if_cancelled()` after each wait; shutdown code that waits on background tasks bounds the
wait with `gather_cancelled`, so one task that ignored its cancel cannot hang a server's stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

log = structlog.get_logger(__name__)


def raise_if_cancelled() -> None:
    """Raise CancelledError when the running task was asked to cancel and carried on anyway."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def gather_cancelled(tasks: Sequence[asyncio.Task[object]], *, timeout_seconds: float,
                           what: str) -> None:
    """Cancel `tasks` and wait for them, at most `timeout_seconds`; cancel again every half
    second (a cancel may be swallowed once). Tasks still running at the deadline are logged
    and left behind: shutdown goes on."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            log.warning("background_tasks_ignored_cancel", what=what,
                        tasks=sorted(task.get_name() for task in pending), waited_seconds=timeout_seconds)
            return
        _, pending = await asyncio.wait(pending, timeout=min(0.5, left))
    await asyncio.gather(*tasks, return_exceptions=True)  # collect results: no "never retrieved"
