"""Shared game processes (process isolation, sessions_per_process > 1): a job's sessions share a
process, their calls reach it in batches, and a session whose game crashes, spins, hangs or
cannot be replayed fails alone while the others go on where they were, in another process.

Real fork servers and game processes, as in test_sandbox.py.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from opentinker_envhost import shared_placement
from opentinker_envhost.errors import EnvHostError, EnvironmentCrashed, EnvironmentTimeout
from opentinker_envhost.sessions import Session, SessionManager
from opentinker_envhost.shared_game import SharedGame
from tests.envhost._managers import owner, reset_soon, running_manager, step_soon
from tests.envhost._processes import alive

LIMITS = {"memory_limit_mb": 64, "cpu_seconds_per_call": 1.0, "call_timeout_s": 30.0, "sessions_per_process": 4}


@pytest.fixture(scope="module")
def manager(loop: asyncio.AbstractEventLoop) -> Iterator[SessionManager]:
    yield from running_manager(loop, **LIMITS)


@pytest.fixture(scope="module")
def impatient(loop: asyncio.AbstractEventLoop) -> Iterator[SessionManager]:
    """A call may take 1 s of wall time."""
    yield from running_manager(loop, **{**LIMITS, "call_timeout_s": 1.0, "cpu_seconds_per_call": 30.0})


def pid(session: Session) -> int:
    return session.game.pid  # type: ignore[attr-defined]


async def tallies(manager: SessionManager, count: int, who: dict[str, str], *,
                  config: dict[str, Any] | None = None) -> list[Session]:
    """`count` tally sessions of `who`, session i reset to start at 100 * i."""
    sessions = [await manager.open("tally", config or {}, **who) for _ in range(count)]
    for index, session in enumerate(sessions):
        observation = (await manager.reset(session.session_id, {"start": 100 * index})).observation
        assert observation == f"total {100 * index}" or (config or {}).get("moody")
    return sessions


@pytest.fixture(params=["awaited", "soon"])
def stepping(request: pytest.FixtureRequest) -> str:
    """How steps are made: `SessionManager.step` (a coroutine per call) or `step_soon` (the
    Interact stream's fast path: a callback per call)."""
    return request.param


async def step_all(manager: SessionManager, actions: dict[Session, str], stepping: str = "awaited") -> dict[Session, Any]:
    """Step every session at once (one turn of the event loop: one batch); the observation or
    the error of each."""
    async def one(session: Session, action: str) -> Any:
        try:
            if stepping == "soon":
                return (await step_soon(manager, session.session_id, action)).observation
            return (await manager.step(session.session_id, action)).observation
        except EnvHostError as error:
            return error
    results = await asyncio.gather(*(one(s, a) for s, a in actions.items()))
    return dict(zip(actions, results, strict=True))


async def close_all(manager: SessionManager, sessions: list[Session]) -> None:
    for session in sessions:
        await manager.close(session.session_id)


def test_a_jobs_sessions_share_processes_up_to_the_limit_and_nobody_elses(loop, manager) -> None:
    async def scenario() -> None:
        who = owner()
        job = await tallies(manager, 6, who)
        assert all(isinstance(s.game, SharedGame) for s in job)
        assert sorted([pid(s) for s in job].count(p) for p in {pid(s) for s in job}) == [2, 4]
        others = [*(await tallies(manager, 1, owner())), *(await tallies(manager, 1, {**who, "tenant": "tenant-b"})),
                  *(await tallies(manager, 1, who, config={"moody": True}))]  # (a new attempt closes the old one's)
        no_job = [await manager.open("tally", {}) for _ in range(2)]
        pids = [pid(s) for s in [*others, *no_job]]
        assert len(set(pids)) == len(pids) and not set(pids) & {pid(s) for s in job}
        await close_all(manager, [*job, *others, *no_job])
    loop.run_until_complete(scenario())


def test_concurrent_steps_reach_the_process_in_batches_and_each_session_keeps_its_own_game(loop, manager, stepping) -> None:
    async def scenario() -> None:
        sessions = await tallies(manager, 4, owner())
        worker = sessions[0].game.worker  # type: ignore[attr-defined]
        before = worker.batches
        for round_number in range(1, 11):
            results = await step_all(manager, {s: str(i + 1) for i, s in enumerate(sessions)}, stepping)
            assert [results[s] for s in sessions] == [f"total {100 * i + (i + 1) * round_number}" for i in range(4)]
        assert worker.batches - before <= 20 < 40  # 40 calls in at most 2 batches per round
        await close_all(manager, sessions)
    loop.run_until_complete(scenario())


def test_an_async_games_sessions_share_a_process_and_its_calls_may_suspend(loop, manager, stepping) -> None:
    """An async game's process serves a batch from inside its event loop: a call that awaits
    (under asyncio.timeout) and calls that do not, in one batch, each answered."""
    async def scenario() -> None:
        who = owner()
        sessions = [await manager.open("async-lingering", {}, **who) for _ in range(4)]
        for session in sessions:
            await manager.reset(session.session_id, {})
        assert len({pid(s) for s in sessions}) == 1
        worker = sessions[0].game.worker  # type: ignore[attr-defined]
        before = worker.batches
        for _ in range(3):
            results = await step_all(manager, dict(zip(sessions, ["wait", "hi", "hi", "wait"], strict=True)), stepping)
            assert all(str(results[s]).startswith("turns ") for s in sessions), results
        assert worker.batches - before <= 6  # 12 calls in at most 2 batches per round
        await close_all(manager, sessions)
    loop.run_until_complete(scenario())


@pytest.mark.parametrize("action, message", [
    ("crash", "the game's process exited with code 3"),
    ("spin", "the game's process exceeded its CPU-time limit of 1s per call"),
])
def test_a_game_that_dies_fails_only_its_session_and_the_others_go_on_where_they_were(
        loop, manager, stepping, action: str, message: str) -> None:
    async def scenario() -> None:
        sessions = await tallies(manager, 4, owner())
        await step_all(manager, {s: "1" for s in sessions}, stepping)
        shared_pid = pid(sessions[1])
        results = await step_all(manager, {sessions[0]: action, **{s: "5" for s in sessions[1:]}}, stepping)
        assert isinstance(results[sessions[0]], EnvironmentCrashed) and message in results[sessions[0]].message
        assert [results[s] for s in sessions[1:]] == [f"total {100 * i + 6}" for i in range(1, 4)]
        assert all(pid(s) != shared_pid for s in sessions[1:]), "the survivors moved to another process"
        assert not alive(shared_pid)
        again = await step_all(manager, {s: "1" for s in sessions[1:]}, stepping)
        assert [again[s] for s in sessions[1:]] == [f"total {100 * i + 7}" for i in range(1, 4)]
        with pytest.raises(EnvHostError, match="broken"):
            await manager.step(sessions[0].session_id, "1")
        await close_all(manager, sessions)
    loop.run_until_complete(scenario())


def test_a_session_moved_into_a_process_that_another_game_then_ends_moves_again(loop, manager, stepping) -> None:
    """The first process dies under one session's call (a call of another session held back
    behind it moves); the process it moves to dies under a third session's call while the moved
    session's episode is replayed there: it moves once more and goes on where it was."""
    async def scenario() -> None:
        who = owner()
        first = await tallies(manager, 4, who)
        second = await tallies(manager, 3, who)
        assert len({pid(s) for s in first}) == 1 and len({pid(s) for s in second}) == 1 != pid(first[0])
        doomed_first = asyncio.ensure_future(step_all(manager, {first[0]: "doom:0.2", second[0]: "doom:0.6"}, stepping))
        await asyncio.sleep(0.05)  # both dooms are running: the next call waits behind the first's
        moved = (await step_all(manager, {first[1]: "7"}, stepping))[first[1]]
        doomed = await doomed_first
        assert all(isinstance(doomed[s], EnvironmentCrashed) for s in (first[0], second[0]))
        assert moved == "total 107", moved
        again = await step_all(manager, {s: "1" for s in (*first[1:], *second[1:])}, stepping)
        assert list(again.values()) == ["total 108", "total 201", "total 301", "total 101", "total 201"]
        await close_all(manager, [*first, *second])
    loop.run_until_complete(scenario())


def test_a_game_that_hangs_times_out_alone(loop, impatient, stepping) -> None:
    async def scenario() -> None:
        sessions = await tallies(impatient, 3, owner())
        results = await step_all(impatient, {sessions[0]: "hang", sessions[1]: "2", sessions[2]: "3"}, stepping)
        assert isinstance(results[sessions[0]], EnvironmentTimeout)
        assert [results[sessions[1]], results[sessions[2]]] == ["total 102", "total 203"]
        await close_all(impatient, sessions)
    loop.run_until_complete(scenario())


def test_a_session_whose_game_replays_differently_fails_saying_it_could_not_be_restored(loop, manager, stepping) -> None:
    async def scenario() -> None:
        moody = await tallies(manager, 2, owner(), config={"moody": True})
        results = await step_all(manager, {moody[0]: "crash", moody[1]: "1"}, stepping)
        assert isinstance(results[moody[0]], EnvironmentCrashed)  # it crashed, or could not be replayed to retry
        lost = results[moody[1]]
        assert isinstance(lost, EnvironmentCrashed)
        assert "could not be restored" in lost.message and "not deterministic" in lost.message
        await close_all(manager, moody)
    loop.run_until_complete(scenario())


def test_a_slow_game_moves_its_sessions_to_processes_of_their_own(loop, manager, stepping) -> None:
    async def scenario() -> None:
        sessions = await tallies(manager, 4, owner())
        await step_all(manager, {s: "1" for s in sessions}, stepping)
        assert len({pid(s) for s in sessions}) == 1
        for _ in range(3):  # 12 calls of 10 ms: over half of the last 16 are slow
            await step_all(manager, {s: "nap:0.01" for s in sessions}, stepping)
        results = await step_all(manager, {s: "2" for s in sessions}, stepping)
        assert [results[s] for s in sessions] == [f"total {100 * i + 3}" for i in range(4)]
        assert len({pid(s) for s in sessions}) == 4
        await close_all(manager, sessions)
    loop.run_until_complete(scenario())


def test_a_game_with_slower_calls_spreads_its_sessions_over_more_processes(loop, manager, monkeypatch, stepping) -> None:
    monkeypatch.setattr(shared_placement, "BATCH_BUDGET_S", 0.004)  # 2 calls of 1.5 ms fit, 4 do not

    async def scenario() -> None:
        sessions = await tallies(manager, 4, owner())
        await step_all(manager, {s: "1" for s in sessions}, stepping)
        worker, placement = sessions[0].game.worker, sessions[0].game.placement  # type: ignore[attr-defined]
        assert len({pid(s) for s in sessions}) == 1 and worker.capacity == 4
        for _ in range(8):  # with the 8 calls before: a median of DENSITY_WINDOW calls is a nap
            await step_all(manager, {s: "nap:0.0015" for s in sessions}, stepping)
        capacity = placement.capacity(worker.key)
        assert capacity in (1, 2), "1.5 ms (more on a busy machine) per call: at most 2 fit in 4 ms"
        results = await step_all(manager, {s: "2" for s in sessions}, stepping)
        assert [results[s] for s in sessions] == [f"total {100 * i + 3}" for i in range(4)], "replayed as they were"
        per_process = collections.Counter(pid(s) for s in sessions)
        assert len(per_process) == 4 // capacity and max(per_process.values()) == capacity
        assert pid(sessions[0]) == worker.pid, "the sessions placed first stay where they were"
        await close_all(manager, sessions)
        assert placement.capacity(worker.key) == LIMITS["sessions_per_process"], \
            "what was learnt about the job's game goes with its last session"
    loop.run_until_complete(scenario())


def test_a_fast_games_sessions_stay_together(loop, manager, stepping) -> None:
    async def scenario() -> None:
        sessions = await tallies(manager, 4, owner())
        for _ in range(20):  # 80 calls: two estimates of the median call
            await step_all(manager, {s: "1" for s in sessions}, stepping)
        assert len({pid(s) for s in sessions}) == 1
        await close_all(manager, sessions)
    loop.run_until_complete(scenario())


def test_a_shared_process_is_kept_for_the_jobs_next_sessions_unless_a_game_failed(loop, manager) -> None:
    async def scenario() -> None:
        who = owner()
        first = await tallies(manager, 2, who)
        kept = pid(first[0])
        await close_all(manager, first)
        assert alive(kept)
        (again,) = await tallies(manager, 1, who)
        assert pid(again) == kept
        with pytest.raises(EnvHostError):
            await manager.step(again.session_id, "not a number")  # the game raises ValueError
        await manager.close(again.session_id)
        (fresh,) = await tallies(manager, 1, who)
        assert pid(fresh) != kept
        await manager.close(fresh.session_id)
    loop.run_until_complete(scenario())


def test_an_episode_too_long_to_replay_is_not_restored(loop, manager, monkeypatch, stepping) -> None:
    monkeypatch.setattr("opentinker_envhost.shared_game.MAX_REPLAY_CALLS", 3)

    async def scenario() -> None:
        sessions = await tallies(manager, 3, owner())
        for _ in range(3):  # the reset and 3 steps: past 3 calls for sessions 1 and 2
            await step_all(manager, {s: "1" for s in sessions[1:]}, stepping)
        await manager.reset(sessions[2].session_id, {"start": 7})  # a new episode: kept again
        results = await step_all(manager, {sessions[0]: "crash", sessions[1]: "1", sessions[2]: "1"}, stepping)
        assert "over 3 calls long" in results[sessions[1]].message
        assert results[sessions[2]] == "total 8"
        await close_all(manager, sessions)
    loop.run_until_complete(scenario())


def test_calls_made_while_a_batch_runs_go_together_once_it_is_answered(loop, manager, stepping) -> None:
    async def scenario() -> None:
        sessions = await tallies(manager, 3, owner())
        worker = sessions[0].game.worker  # type: ignore[attr-defined]
        napping = asyncio.ensure_future(step_all(manager, {sessions[0]: "nap:0.3"}, stepping))
        await asyncio.sleep(0.1)  # its batch runs in the process
        batches = worker.batches
        rest = asyncio.ensure_future(step_all(manager, {s: "1" for s in sessions[1:]}, stepping))
        await asyncio.sleep(0.05)
        assert worker.batches == batches and len(worker.outbox) == 2, "held back while the process works"
        assert (await napping)[sessions[0]] == "total 0"
        assert [(await rest)[s] for s in sessions[1:]] == ["total 101", "total 201"]
        assert worker.batches == batches + 1, "the held calls went in one batch"
        await close_all(manager, sessions)
    loop.run_until_complete(scenario())


def test_calls_held_back_when_the_process_is_lost_are_rebuilt_elsewhere(loop, manager, stepping) -> None:
    async def scenario() -> None:
        sessions = await tallies(manager, 3, owner())
        worker = sessions[0].game.worker  # type: ignore[attr-defined]
        napping = asyncio.ensure_future(step_all(manager, {sessions[0]: "nap:5"}, stepping))
        await asyncio.sleep(0.1)
        rest = asyncio.ensure_future(step_all(manager, {s: "2" for s in sessions[1:]}, stepping))
        await asyncio.sleep(0.05)
        assert len(worker.outbox) == 2
        worker.kill("killed by the test")
        lost = (await napping)[sessions[0]]
        assert isinstance(lost, EnvironmentCrashed) and "killed by the test" in lost.message  # alone in its batch
        assert [(await rest)[s] for s in sessions[1:]] == ["total 102", "total 202"]
        assert all(pid(s) != worker.pid for s in sessions[1:])
        await close_all(manager, sessions)
    loop.run_until_complete(scenario())


def test_a_reset_held_back_when_the_process_is_lost_runs_elsewhere(loop, manager) -> None:
    async def scenario() -> None:
        sessions = await tallies(manager, 2, owner())
        worker = sessions[0].game.worker  # type: ignore[attr-defined]
        napping = asyncio.ensure_future(step_soon(manager, sessions[0].session_id, "nap:5"))
        await asyncio.sleep(0.1)
        resetting = asyncio.ensure_future(reset_soon(manager, sessions[1].session_id, {"start": 7}))
        await asyncio.sleep(0.05)
        assert len(worker.outbox) == 1
        worker.kill("killed by the test")
        with pytest.raises(EnvironmentCrashed, match="killed by the test"):
            await napping
        assert (await resetting).observation == "total 7"
        assert pid(sessions[1]) != worker.pid
        assert (await step_soon(manager, sessions[1].session_id, "3")).observation == "total 10"
        await close_all(manager, sessions)
    loop.run_until_complete(scenario())


def test_a_finished_fast_path_call_leaves_nothing_behind(loop, manager) -> None:
    """Nothing of a finished `step_soon`/`reset_soon` call (its callback, its closures) stays
    referenced: a cache or list holding them would grow with every step of every session."""
    class Then:
        def __init__(self) -> None:
            self.done = asyncio.get_running_loop().create_future()

        def __call__(self, result: Any, error: BaseException | None) -> None:
            self.done.set_result(error or result)

    async def scenario() -> None:
        (session,) = await tallies(manager, 1, owner())
        refs = []
        for call in (lambda then: manager.step_soon(session.session_id, "1", then),
                     lambda then: manager.reset_soon(session.session_id, {"start": 3}, then)):
            then = Then()
            assert call(then)
            assert not isinstance(await then.done, BaseException)
            refs.append(weakref.ref(then))
            del then
        gc.collect()
        assert [ref() for ref in refs] == [None, None]
        await manager.close(session.session_id)
    loop.run_until_complete(scenario())
