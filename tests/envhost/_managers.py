"""Session managers over real fork servers for the EnvHost's process-isolation tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

from opentinker_envhost.sessions import SessionLimits, SessionManager
from tests.envhost.games import catalog_with_test_games


def running_manager(loop: asyncio.AbstractEventLoop, **limits: Any) -> Iterator[SessionManager]:
    """A started manager of the test games with `limits`, closed (every process gone) after."""
    manager = SessionManager(catalog_with_test_games(), SessionLimits(**limits))
    loop.run_until_complete(manager.start())
    yield manager
    loop.run_until_complete(manager.close_all())


def owner(**changes: str) -> dict[str, str]:
    """A new tenant/job/attempt (each test its own), with `changes`."""
    return {"tenant": "tenant-a", "job_id": f"job-{uuid.uuid4().hex[:8]}", "attempt": "attempt-1", **changes}


def _awaitable_then() -> tuple[asyncio.Future[Any], Any]:
    """A future and the `then` callback that resolves it."""
    future = asyncio.get_running_loop().create_future()

    def then(result: Any, error: BaseException | None) -> None:
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    return future, then


async def step_soon(manager: SessionManager, session_id: str, action: str) -> Any:
    """`manager.step_soon` awaited (its `then` resolves a future); `manager.step` when the fast
    path declines (the session must move first, or a call holds it)."""
    future, then = _awaitable_then()
    if not manager.step_soon(session_id, action, then):
        return await manager.step(session_id, action)
    return await future


async def reset_soon(manager: SessionManager, session_id: str, kwargs: dict[str, Any]) -> Any:
    """`manager.reset_soon` awaited, like `step_soon`."""
    future, then = _awaitable_then()
    if not manager.reset_soon(session_id, kwargs, then):
        return await manager.reset(session_id, kwargs)
    return await future
