"""The EnvHost session manager (no grpc): lifecycle, limits, request ids, timeouts, games that
raise or misbehave, a slow game next to a fast one, idle reaping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from opentinker_runtime.games import MathGame
from opentinker_envhost.errors import (
    EnvHostError,
    EnvironmentFailure,
    EnvironmentTimeout,
    InvalidArgument,
    NotYourTurnError,
    RequestIdReused,
    SessionLimitReached,
    SessionNotFound,
    UnknownEnvironment,
    WrongSessionState,
)
from opentinker_envhost.sessions import Isolation, SessionLimits, SessionManager, SessionState
from tests.envhost.games import catalog_with_test_games, closed_words


def manager(**limits: Any) -> SessionManager:
    return SessionManager(catalog_with_test_games(), SessionLimits(**limits))


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


async def raises(error_type: type[EnvHostError], call: Awaitable[Any],
                 match: str | None = None) -> EnvHostError:
    with pytest.raises(error_type, match=match) as caught:
        await call
    return caught.value


def test_math_episode_end_to_end() -> None:
    async def scenario() -> None:
        sessions = manager()
        session = await sessions.open("math", {"seed": 5, "difficulty": "medium"}, job_id="job-1")
        outcome = await sessions.reset(session.session_id, {"index": 4})
        expected_game = MathGame(seed=5, difficulty="medium")
        assert outcome.observation == expected_game.reset(index=4)
        assert (outcome.system_prompt, outcome.initial_user_message) == ("Answer with the number only.", "")
        answer = str(eval(outcome.observation.rstrip("=")))  # noqa: S307
        result = await sessions.step(session.session_id, answer)
        assert result.done and result.reward == 1.0 and result.info["expected"] == answer
        assert await sessions.close(session.session_id) == 1
        await raises(SessionNotFound, sessions.step(session.session_id, "1"))
    run(scenario)


def test_lookup_errors_name_the_field() -> None:
    async def scenario() -> None:
        sessions = manager()
        await raises(UnknownEnvironment, sessions.open("chess", {}),
                     match="env_name: no environment named 'chess'")
        await raises(InvalidArgument, sessions.open("", {}), match="env_name: required")
        await raises(SessionNotFound, sessions.reset("nope", {}), match="session_id: no open session 'nope'")
        await raises(InvalidArgument, sessions.step("", "x"), match="session_id: required")
        await raises(SessionNotFound, sessions.close("nope"))
    run(scenario)


def test_bad_config_and_kwargs_are_invalid_arguments() -> None:
    async def scenario() -> None:
        sessions = manager()
        await raises(InvalidArgument, sessions.open("math", {"colour": "red"}),
                     match="config: MathGame.. does not accept .*colour")
        await raises(InvalidArgument, sessions.open("math", {"difficulty": "insane"}), match="^difficulty")
        session = await sessions.open("math", {})
        await raises(InvalidArgument, sessions.reset(session.session_id, {"level": 3}),
                     match="kwargs: .*level")
        await raises(InvalidArgument, sessions.reset(session.session_id, {"split": "test"}), match="^split")
        await raises(WrongSessionState, sessions.step(session.session_id, "1"), match="reset was rejected")
        assert len(sessions.sessions) == 1
    run(scenario)


def test_session_limit_and_freed_slots() -> None:
    async def scenario() -> None:
        sessions = manager(max_sessions=2)
        first = await sessions.open("echo", {})
        await sessions.open("echo", {})
        await raises(SessionLimitReached, sessions.open("echo", {}), match="max_sessions: .* 2 sessions")
        await sessions.close(first.session_id)
        await sessions.open("echo", {})
        failed_open = sessions.open("explode", {"fail_in": "init"})
        await raises(SessionLimitReached, failed_open)
        assert sessions.opening == 0
    run(scenario)


def test_a_failed_constructor_frees_its_slot_and_reports_the_traceback() -> None:
    async def scenario() -> None:
        sessions = manager(max_sessions=1)
        error = await raises(EnvironmentFailure, sessions.open("explode", {"fail_in": "init"}),
                             match=r"Explode\(\) raised RuntimeError: boom in init")
        assert "games.py" in error.traceback and "boom in init" in error.traceback
        assert sessions.opening == 0 and not sessions.sessions
        await sessions.open("echo", {})
    run(scenario)


def test_request_id_makes_open_idempotent() -> None:
    async def scenario() -> None:
        sessions = manager()
        first = await sessions.open("echo", {"turns": 3}, request_id="r1")
        again = await sessions.open("echo", {"turns": 3}, request_id="r1")
        assert again is first and len(sessions.sessions) == 1
        await raises(RequestIdReused, sessions.open("echo", {"turns": 4}, request_id="r1"),
                     match="request_id")
        concurrent = await asyncio.gather(*[sessions.open("echo", {}, request_id="r2") for _ in range(5)])
        assert len({s.session_id for s in concurrent}) == 1 and len(sessions.sessions) == 2
        await sessions.close(first.session_id)
        assert (await sessions.open("echo", {"turns": 4}, request_id="r1")).session_id != first.session_id
    run(scenario)


def test_step_before_reset_and_after_done_are_failed_preconditions() -> None:
    async def scenario() -> None:
        sessions = manager()
        session = await sessions.open("echo", {"turns": 1})
        await raises(WrongSessionState, sessions.step(session.session_id, "hi"), match="step before reset")
        await sessions.reset(session.session_id, {"word": "yo"})
        assert (await sessions.step(session.session_id, "yo")).done
        await raises(WrongSessionState, sessions.step(session.session_id, "yo"), match="episode is done")
        assert (await sessions.reset(session.session_id, {})).observation == "hi"
        assert (await sessions.step(session.session_id, "hi")).reward == 1.0
        assert session.steps == 2
    run(scenario)


@pytest.mark.parametrize("isolation", list(Isolation))
def test_a_raising_game_fails_only_its_own_call_and_session(isolation: Isolation) -> None:
    async def scenario() -> None:
        sessions = manager(isolation=isolation)
        bad, good = await sessions.open("explode", {}), await sessions.open("echo", {})
        await sessions.reset(bad.session_id, {})
        await sessions.reset(good.session_id, {})
        error = await raises(EnvironmentFailure, sessions.step(bad.session_id, "explode"),
                             match=r"Explode.step\(\) raised ZeroDivisionError: boom in step")
        assert "Traceback (most recent call last)" in error.traceback
        assert "in step" in error.traceback and "ZeroDivisionError: boom in step" in error.traceback
        assert (await sessions.step(good.session_id, "hi")).reward == 1.0
        await raises(WrongSessionState, sessions.step(bad.session_id, "hi"), match="episode failed")
        await sessions.reset(bad.session_id, {})
        assert (await sessions.step(bad.session_id, "hi")).reward == 1.0
    run(scenario)


def test_an_async_game_that_raises_is_an_environment_failure() -> None:
    async def scenario() -> None:
        sessions = manager()
        session = await sessions.open("async-sleepy", {})
        await sessions.reset(session.session_id, {})
        error = await raises(EnvironmentFailure, sessions.step(session.session_id, "explode"),
                             match=r"AsyncSleepy.step\(\) raised LookupError: async boom")
        assert error.traceback.splitlines()[1].endswith("in step")  # starts in the game
        assert "games.py" in error.traceback and "sessions.py" not in error.traceback
    run(scenario)


def test_a_raising_reset_is_an_environment_failure() -> None:
    async def scenario() -> None:
        sessions = manager()
        session = await sessions.open("explode", {"fail_in": "reset"})
        error = await raises(EnvironmentFailure, sessions.reset(session.session_id, {}),
                             match=r"reset\(\) raised KeyError")
        assert "boom in reset" in error.traceback
        assert (await sessions.reset(session.session_id, {"fail": False})).observation == "hi"
    run(scenario)


def test_invalid_returns_and_huge_observations_are_failures() -> None:
    async def scenario() -> None:
        sessions = manager(max_observation_chars=100)
        session = await sessions.open("bad-returns", {})
        await raises(EnvironmentFailure, sessions.reset(session.session_id, {}),
                     match=r"reset\(\) must return str, got int")
        fine = await sessions.open("bad-returns", {"reset_returns": "str"})
        await sessions.reset(fine.session_id, {})
        await raises(EnvironmentFailure, sessions.step(fine.session_id, "x"),
                     match=r"step\(\) returned 1000 characters; the limit is 100")
    run(scenario)


@pytest.mark.parametrize("isolation", list(Isolation))
@pytest.mark.parametrize("env_name", ["sleepy", "async-sleepy"])
def test_a_game_past_the_timeout_breaks_its_session(env_name: str, isolation: Isolation) -> None:
    async def scenario() -> None:
        sessions = manager(call_timeout_s=0.2, isolation=isolation)
        session = await sessions.open(env_name, {"seconds": 2.0})
        await sessions.reset(session.session_id, {})
        started = time.monotonic()
        await raises(EnvironmentTimeout, sessions.step(session.session_id, "sleep"),
                     match=r"step\(\) did not return within 0.2s")
        assert time.monotonic() - started < 1.0
        assert session.state is SessionState.BROKEN
        await raises(WrongSessionState, sessions.reset(session.session_id, {}), match="broken .*close it")
        await raises(WrongSessionState, sessions.step(session.session_id, "x"), match="broken")
        await sessions.close(session.session_id)
    run(scenario)


def test_a_cancelled_call_breaks_the_session() -> None:
    async def scenario() -> None:
        sessions = manager()
        session = await sessions.open("sleepy", {"seconds": 0.5})
        await sessions.reset(session.session_id, {})
        task = asyncio.create_task(sessions.step(session.session_id, "sleep"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await raises(WrongSessionState, sessions.step(session.session_id, "x"), match="cancelled")
    run(scenario)


def test_a_blocking_game_does_not_stall_other_sessions() -> None:
    async def scenario() -> None:
        sessions = manager()
        slow, fast = await sessions.open("sleepy", {"seconds": 1.0}), await sessions.open("math", {})
        await sessions.reset(slow.session_id, {})
        started = time.monotonic()
        slow_step = asyncio.create_task(sessions.step(slow.session_id, "sleep"))
        await asyncio.sleep(0.05)  # the slow step is now blocking its thread
        for index in range(20):
            await sessions.reset(fast.session_id, {"index": index})
            await sessions.step(fast.session_id, "0")
        fast_elapsed = time.monotonic() - started
        assert not slow_step.done()
        await slow_step
        slow_elapsed = time.monotonic() - started
        assert fast_elapsed < 0.5, f"20 fast episodes took {fast_elapsed:.2f}s next to a sleeping game"
        assert slow_elapsed >= 1.0
    run(scenario)


def test_calls_on_one_session_run_in_arrival_order() -> None:
    async def scenario() -> None:
        sessions = manager()
        session = await sessions.open("echo", {"turns": 3})
        calls = [sessions.reset(session.session_id, {"word": "a"}),
                 sessions.step(session.session_id, "a"), sessions.step(session.session_id, "b"),
                 sessions.step(session.session_id, "a")]
        reset, *steps = await asyncio.gather(*calls)
        assert reset.observation == "a"
        assert [(s.reward, s.done, s.info["left"]) for s in steps] == [(1.0, False, 2), (0.0, False, 1),
                                                                       (1.0, True, 0)]
    run(scenario)


def test_idle_sessions_are_reaped_after_the_ttl(tmp_path: Path) -> None:
    closed_log = tmp_path / "closed.txt"

    async def scenario() -> None:
        now = [1000.0]
        sessions = SessionManager(catalog_with_test_games(), SessionLimits(idle_ttl_s=60),
                                  clock=lambda: now[0])
        idle = await sessions.open("echo", {"closed_log": str(closed_log)})
        active = await sessions.open("echo", {"closed_log": str(closed_log)})
        await sessions.reset(idle.session_id, {"word": "idle-word"})
        now[0] += 50
        await sessions.reset(active.session_id, {})
        now[0] += 20
        assert await sessions.reap_idle() == [idle.session_id]
        assert closed_words(closed_log) == ["idle-word"]
        assert list(sessions.sessions) == [active.session_id]
        await raises(SessionNotFound, sessions.step(idle.session_id, "x"))
        await sessions.close_all()
    run(scenario)


def test_seats() -> None:
    async def scenario() -> None:
        sessions = manager()
        seated, echo = await sessions.open("seated", {}), await sessions.open("echo", {})
        await sessions.reset(seated.session_id, {})
        await sessions.reset(echo.session_id, {})
        assert (await sessions.step(seated.session_id, "e4", seat="white")).observation == "white played e4"
        assert (await sessions.step(seated.session_id, "d5")).observation == " played d5"  # "": the seat to move
        await raises(InvalidArgument, sessions.step(seated.session_id, "e4", seat="green"),
                     match="seat: expected one of black, white")
        await raises(InvalidArgument, sessions.step(echo.session_id, "hi", seat="black"),
                     match="seat: echo is a single-agent")
    run(scenario)


def test_a_step_out_of_turn_is_refused_and_the_episode_goes_on() -> None:
    async def scenario() -> None:
        sessions = manager()
        game = await sessions.open("alternating", {})
        await sessions.reset(game.session_id, {})
        await raises(NotYourTurnError, sessions.step(game.session_id, "e4", seat="white"),
                     match="seat: black is to move, not white")
        assert (await sessions.step(game.session_id, "e4", seat="black")).observation == "black played e4"
        assert (await sessions.step(game.session_id, "d5", seat="white")).observation == "white played d5"
    run(scenario)


def test_seed_reaches_games_that_accept_it_and_is_dropped_for_others() -> None:
    async def scenario() -> None:
        sessions = manager()
        session = await sessions.open("async-sleepy", {})
        assert (await sessions.reset(session.session_id, {}, seed=9)).observation == "seed 9"
        assert (await sessions.step(session.session_id, "x")).reward == 9.0
        math = await sessions.open("math", {"seed": 1})
        observed = (await sessions.reset(math.session_id, {}, seed=3)).observation
        assert observed == MathGame(seed=1).reset(index=3)
        echo = await sessions.open("echo", {})  # its reset() takes no seed: the hint is dropped
        assert (await sessions.reset(echo.session_id, {"word": "w"}, seed=3)).observation == "w"
    run(scenario)


@pytest.mark.parametrize("isolation", list(Isolation))
def test_close_all_closes_every_game(isolation: Isolation, tmp_path: Path) -> None:
    closed_log = tmp_path / "closed.txt"

    async def scenario() -> None:
        sessions = manager(isolation=isolation)
        for word in ("a", "b"):
            session = await sessions.open("echo", {"closed_log": str(closed_log)})
            await sessions.reset(session.session_id, {"word": word})
        await sessions.close_all()
        assert sorted(closed_words(closed_log)) == ["a", "b"] and not sessions.sessions
    run(scenario)


def test_close_waits_for_calls_already_queued_and_refuses_later_ones() -> None:
    async def scenario() -> None:
        sessions = manager()
        session = await sessions.open("sleepy", {"seconds": 0.2})
        await sessions.reset(session.session_id, {})
        running = asyncio.create_task(sessions.step(session.session_id, "sleep"))
        queued = asyncio.create_task(sessions.step(session.session_id, "hi"))
        await asyncio.sleep(0.05)
        closing = asyncio.create_task(sessions.close(session.session_id))
        await asyncio.sleep(0)
        await raises(SessionNotFound, sessions.step(session.session_id, "hi"))
        assert await closing == 2
        assert (await running).observation == (await queued).observation == "hi"
    run(scenario)


@pytest.mark.parametrize("isolation", list(Isolation))
@pytest.mark.parametrize("env_name", ["strict", "async-strict"])
def test_a_cut_off_action_goes_to_the_games_on_truncated(isolation: Isolation, env_name: str) -> None:
    async def scenario() -> None:
        sessions = manager(isolation=isolation)
        session = await sessions.open(env_name, {}, job_id="job-cut")
        await sessions.reset(session.session_id, {})
        whole = await sessions.step(session.session_id, "fine")
        assert (whole.reward, whole.done, whole.info) == (1.0, False, {"cut": False})
        cut = await sessions.step(session.session_id, "ramble ramble", truncated=True)
        assert (cut.reward, cut.done, cut.observation) == (-1.0, True, "cut after 13 chars")
        assert cut.info == {"cut": True}
        await sessions.close_all()
    run(scenario)


@pytest.mark.parametrize("isolation", list(Isolation))
def test_a_game_without_on_truncated_judges_a_cut_action_with_its_step(isolation: Isolation) -> None:
    async def scenario() -> None:
        sessions = manager(isolation=isolation)
        session = await sessions.open("echo", {"turns": 2})
        await sessions.reset(session.session_id, {"word": "hi"})
        result = await sessions.step(session.session_id, "hi h", truncated=True)
        assert (result.reward, result.done, result.info) == (0.0, False, {"left": 1})
        await sessions.close_all()
    run(scenario)
