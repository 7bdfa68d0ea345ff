"""Warm game processes (process isolation): a job's next session is built in the process its
closed session left, for the same tenant, job, attempt, game and config only, and never in a
process whose game failed, hit a limit or left something running; the game object is new each
time (class state, which lives in the process, is what a kept process carries over).

Real fork servers and game processes, as in test_sandbox.py; one manager serves the module. Its
sessions get a process each (sessions_per_process=1); sessions sharing processes are
test_shared_processes.py's.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import structlog

from opentinker_envhost.errors import EnvironmentCrashed, EnvironmentFailure, EnvironmentTimeout
from opentinker_envhost.sandbox_pool import WarmPool
from opentinker_envhost.sessions import Session, SessionLimits, SessionManager
from tests.chaos._misbehaving_games import PRINTED_LINE
from tests.envhost._managers import owner, running_manager
from tests.envhost._processes import alive, descendants, wait_until_gone
from tests.envhost.games import catalog_with_test_games

LIMITS = {"memory_limit_mb": 64, "cpu_seconds_per_call": 1.0, "call_timeout_s": 30.0, "sessions_per_process": 1}


@pytest.fixture(scope="module")
def manager(loop: asyncio.AbstractEventLoop) -> Iterator[SessionManager]:
    """1 s of CPU and 64 MiB per call; the wall-clock timeout is far."""
    yield from running_manager(loop, **LIMITS)


@pytest.fixture(scope="module")
def impatient(loop: asyncio.AbstractEventLoop) -> Iterator[SessionManager]:
    """A call may take 1 s."""
    yield from running_manager(loop, **{**LIMITS, "call_timeout_s": 1.0, "cpu_seconds_per_call": 30.0})


def pid(session: Session) -> int:
    return session.game.pid  # type: ignore[attr-defined]


async def open_and_reset(manager: SessionManager, env: str = "lingering", config: dict[str, Any] | None = None,
                         **who: str) -> tuple[Session, str]:
    session = await manager.open(env, config or {}, **who)
    return session, (await manager.reset(session.session_id, {})).observation


# -- reuse ---------------------------------------------------------------------------------------

def test_the_next_session_of_a_job_gets_the_same_process_and_a_new_game(loop, manager) -> None:
    async def scenario() -> None:
        who = owner()
        first, observation = await open_and_reset(manager, **who)
        assert observation == "object 1 class 1"
        assert (await manager.step(first.session_id, "hi")).reward == 1.0
        await manager.close(first.session_id)
        assert alive(pid(first)), "a clean session's process is kept"
        for number in (2, 3):
            again, observation = await open_and_reset(manager, **who)
            assert pid(again) == pid(first)
            # a new game object (its own state starts anew), in a process that keeps class state
            assert observation == f"object 1 class {number}"
            await manager.close(again.session_id)
    loop.run_until_complete(scenario())


def test_a_kept_process_serves_only_its_tenant_job_attempt_and_config(loop, manager) -> None:
    async def scenario() -> None:
        who = owner()
        first, _ = await open_and_reset(manager, **who)
        await manager.close(first.session_id)
        others = [owner(tenant="tenant-b", job_id=who["job_id"]), {**who, "job_id": "another-job"},
                  {**who, "attempt": "attempt-2"}, {"tenant": who["tenant"]}]
        for other in others:
            session, observation = await open_and_reset(manager, **other)
            assert pid(session) != pid(first), f"{other} got {who}'s process"
            assert observation == "object 1 class 1"  # a fresh process
            await manager.close(session.session_id)
        configured, _ = await open_and_reset(manager, config={"turns": 5}, **who)
        assert pid(configured) != pid(first), "a session with another config got the process"
        await manager.close(configured.session_id)
        back, _ = await open_and_reset(manager, **who)
        assert pid(back) == pid(first)
        await manager.close(back.session_id)
    loop.run_until_complete(scenario())


def test_concurrent_sessions_of_one_job_never_share_a_process(loop, manager) -> None:
    async def scenario() -> None:
        who = owner()
        sessions = [(await open_and_reset(manager, **who))[0] for _ in range(3)]
        assert len({pid(s) for s in sessions}) == 3
        kept = {pid(s) for s in sessions}
        for session in sessions:
            await manager.close(session.session_id)
        reopened = [(await open_and_reset(manager, **who))[0] for _ in range(4)]
        assert len({pid(s) for s in reopened}) == 4 and len({pid(s) for s in reopened} & kept) == 3
        for session in reopened:
            await manager.close(session.session_id)
    loop.run_until_complete(scenario())


# -- what is never reused ------------------------------------------------------------------------

async def closed_process_is_gone(manager: SessionManager, session: Session, who: dict[str, str]) -> None:
    """Close `session`: its process must end, and the next session of `who` gets another one."""
    await manager.close(session.session_id)
    assert not wait_until_gone({pid(session)}), "the process was kept"
    again, _ = await open_and_reset(manager, "misbehaving" if session.spec.name == "misbehaving" else "lingering",
                                    **who)
    assert pid(again) != pid(session)
    assert (await manager.step(again.session_id, "ok" if session.spec.name == "misbehaving" else "hi")).reward >= 0
    await manager.close(again.session_id)


def test_a_process_whose_game_raised_is_not_kept(loop, manager) -> None:
    async def scenario() -> None:
        who = owner()
        session, _ = await open_and_reset(manager, "misbehaving", **who)
        with pytest.raises(EnvironmentFailure, match="raised on purpose"):
            await manager.step(session.session_id, "misbehave:raise")
        await manager.reset(session.session_id, {})
        assert (await manager.step(session.session_id, "ok")).observation == "ok"
        await closed_process_is_gone(manager, session, who)
    loop.run_until_complete(scenario())


@pytest.mark.parametrize(("kind", "error"), [("exit", EnvironmentCrashed), ("leak", EnvironmentCrashed),
                                             ("busy", EnvironmentCrashed), ("hang", EnvironmentTimeout)])
def test_a_process_that_died_hit_a_limit_or_hung_is_never_reused(loop, manager, impatient, kind: str,
                                                                  error: type) -> None:
    if kind == "hang":
        manager = impatient

    async def scenario() -> None:
        who = owner()
        warm, _ = await open_and_reset(manager, "misbehaving", **who)
        await manager.close(warm.session_id)  # kept: the next session gets this process
        session, _ = await open_and_reset(manager, "misbehaving", **who)
        assert pid(session) == pid(warm)
        with pytest.raises(error):
            await manager.step(session.session_id, f"misbehave:{kind}")
        await closed_process_is_gone(manager, session, who)
    loop.run_until_complete(scenario())


@pytest.mark.parametrize("leave", ["thread", "child", "daemon", "file", "cwd", "memory"])  # 16 of 64 MiB
def test_a_game_that_leaves_something_behind_is_not_kept(loop, manager, leave: str) -> None:
    async def scenario() -> None:
        who = owner()
        session, _ = await open_and_reset(manager, **who)
        await manager.step(session.session_id, f"leave:{leave}")
        await closed_process_is_gone(manager, session, who)
    loop.run_until_complete(scenario())


# -- async games: served from inside the process's event loop -------------------------------------

def test_an_async_games_next_session_gets_the_same_process_and_a_new_game(loop, manager) -> None:
    """The task that serves the calls is not a task the game left behind."""
    async def scenario() -> None:
        who = owner()
        first, observation = await open_and_reset(manager, "async-lingering", **who)
        assert observation == "object 1 class 1"
        await manager.step(first.session_id, "wait")  # a call that suspends, under asyncio.timeout
        await manager.close(first.session_id)
        again, observation = await open_and_reset(manager, "async-lingering", **who)
        assert pid(again) == pid(first), "a clean async game's process was not kept"
        assert observation == "object 1 class 2"
        await manager.close(again.session_id)
    loop.run_until_complete(scenario())


def test_an_async_game_that_leaves_a_task_running_is_not_kept(loop, manager) -> None:
    async def scenario() -> None:
        who = owner()
        session, _ = await open_and_reset(manager, "async-lingering", **who)
        await manager.step(session.session_id, "leave:task")
        await manager.close(session.session_id)
        assert not wait_until_gone({pid(session)}), "the process was kept"
        again, observation = await open_and_reset(manager, "async-lingering", **who)
        assert pid(again) != pid(session) and observation == "object 1 class 1"
        await manager.close(again.session_id)
    loop.run_until_complete(scenario())


def test_an_async_games_tasks_run_while_its_calls_await_and_not_between_calls(loop, manager) -> None:
    async def scenario() -> list[int]:
        session, _ = await open_and_reset(manager, "async-lingering", **owner())
        turns = []
        for action in ("spawn", "hi", "hi", "wait", "hi"):
            observation = (await manager.step(session.session_id, action)).observation
            turns.append(int(observation.removeprefix("turns ")))
            await asyncio.sleep(0.05)  # between calls the game's loop waits for the next one
        await manager.close(session.session_id)
        return turns
    turns = loop.run_until_complete(scenario())
    assert turns[0] <= 1 and turns[1] == turns[2] == turns[0], turns  # no awaiting call: no turns
    assert turns[3] > turns[2] + 5, turns  # 50 ms awaited: the spawned task ran meanwhile
    assert turns[4] == turns[3], turns


def test_output_is_logged_under_the_session_that_printed_it_and_not_shown_to_the_next(loop, manager) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], str, str, EnvironmentCrashed]:
        who = owner()
        with structlog.testing.capture_logs() as logs:
            printer = await manager.open("misbehaving", {}, **who)
            await manager.reset(printer.session_id, {"behaviour": "reset:print"})
            await manager.close(printer.session_id)
            after = await manager.open("misbehaving", {}, **who)
            assert pid(after) == pid(printer)
            await manager.reset(after.session_id, {"behaviour": ""})
            with pytest.raises(EnvironmentCrashed) as crashed:
                await manager.step(after.session_id, "misbehave:exit")
            await manager.close(after.session_id)
        return logs, printer.session_id, after.session_id, crashed.value
    logs, printer, after, crashed = loop.run_until_complete(scenario())
    printed = [entry["session_id"] for entry in logs
               if entry["event"] == "game_output" and PRINTED_LINE in entry["line"]]
    assert printed == [printer] * 5
    assert PRINTED_LINE not in crashed.traceback, "the next session was shown its predecessor's output"


# -- bounds and the end ----------------------------------------------------------------------------

def test_kept_processes_end_after_their_idle_ttl_and_with_the_manager() -> None:
    async def scenario() -> None:
        before = descendants_of_us()
        manager = SessionManager(catalog_with_test_games(), SessionLimits(**LIMITS, warm_idle_s=0.3))
        who = owner()
        expiring, _ = await open_and_reset(manager, **who)
        await manager.close(expiring.session_id)
        await asyncio.sleep(0.5)
        await manager.reap_idle()
        assert not wait_until_gone({pid(expiring)}), "an idle kept process outlived its TTL"
        kept, _ = await open_and_reset(manager, **who)
        await manager.close(kept.session_id)
        assert alive(pid(kept))
        await manager.close_all()
        assert not wait_until_gone(descendants_of_us() - before), "a kept process outlived its EnvHost"
    asyncio.run(scenario())


def test_no_process_is_kept_with_warm_processes_0() -> None:
    async def scenario() -> None:
        manager = SessionManager(catalog_with_test_games(), SessionLimits(**LIMITS, warm_processes=0))
        session, _ = await open_and_reset(manager, **owner())
        await manager.close(session.session_id)
        assert not wait_until_gone({pid(session)})
        await manager.close_all()
    asyncio.run(scenario())


def descendants_of_us() -> set[int]:
    return descendants(os.getpid())


@dataclass(eq=False)
class FakeProcess:
    owner_key: tuple[str, ...]


def test_the_pool_retires_the_least_recently_kept_past_its_capacity_and_ttl() -> None:
    now = [0.0]
    pool = WarmPool(2, idle_ttl_s=10.0, clock=lambda: now[0])
    a1, a2, b1 = FakeProcess(("a",)), FakeProcess(("a",)), FakeProcess(("b",))
    assert pool.put(a1) == [] and pool.put(a2) == []  # type: ignore[arg-type]
    now[0] = 5.0
    assert pool.put(b1) == [a1]  # type: ignore[arg-type]
    assert pool.take(("b",)) is b1 and pool.take(("b",)) is None
    pool.put(b1)  # type: ignore[arg-type]
    now[0] = 12.0
    assert pool.expired() == [a2] and len(pool) == 1
    assert pool.take(("b",)) is b1 and len(pool) == 0
    assert WarmPool(0, 1.0).put(a1) == [a1]  # type: ignore[arg-type]
    assert pool.put(FakeProcess(())) != []  # type: ignore[arg-type]  # no owner: never kept
