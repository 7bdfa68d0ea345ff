"""Process isolation: every way a game can misbehave fails its own session with the right error,
a healthy session next to it goes on, and no game process outlives its session or its EnvHost.

The SessionManagers here are real (a real fork server, real game processes, real signals and
rlimits); two of them live for the whole module on one event loop, so the fork server starts
twice, not once per test.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_runtime.core import metrics
from opentinker_runtime.core.embedded_redis import free_port
from opentinker_envhost.errors import (
    EnvHostError,
    EnvironmentCrashed,
    EnvironmentFailure,
    EnvironmentTimeout,
    WrongSessionState,
)
from opentinker_envhost.game_output import LOG_BYTES_PER_WINDOW, MAX_LINE_CHARS, WINDOW_S, GameOutput
from opentinker_envhost.sessions import Session, SessionLimits, SessionManager, SessionState
from tests._services import SERVICES, ServiceProcess
from tests.chaos._misbehaving_games import PRINTED_LINE
from tests.envhost._processes import alive, descendants, wait_until_gone
from tests.envhost.games import catalog_with_test_games

MEMORY_LIMIT_MB = 64
MAX_CHARS = 10_000
GAMES_SETTING = "misbehaving=tests.chaos._misbehaving_games:Misbehaving"
ENVHOST = next(case for case in SERVICES if case.name == "envhost")


# -- processes ---------------------------------------------------------------------------------


async def wait_for_descendants(pid: int, count: int, exclude: set[int] = frozenset(),
                               timeout: float = 15.0) -> set[int]:
    """The live processes below `pid` (less `exclude`) once there are `count` of them."""
    deadline = time.monotonic() + timeout
    while len(found := descendants(pid) - exclude) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(found) == count, f"expected {count} processes below {pid}, found {sorted(found)}"
    return found


# -- fixtures ----------------------------------------------------------------------------------

def _manager(loop: asyncio.AbstractEventLoop, **limits: Any) -> Iterator[SessionManager]:
    manager = SessionManager(catalog_with_test_games(), SessionLimits(
        memory_limit_mb=MEMORY_LIMIT_MB, max_observation_chars=MAX_CHARS, **limits))
    loop.run_until_complete(manager.start())
    yield manager
    loop.run_until_complete(manager.close_all())


@pytest.fixture(scope="module")
def sandbox(loop: asyncio.AbstractEventLoop) -> Iterator[SessionManager]:
    """Games get 1 s of CPU per call and 64 MiB; the wall-clock timeout is far (20 s)."""
    yield from _manager(loop, call_timeout_s=20.0, cpu_seconds_per_call=1.0)


@pytest.fixture(scope="module")
def impatient(loop: asyncio.AbstractEventLoop) -> Iterator[SessionManager]:
    """A call may take 0.5 s."""
    yield from _manager(loop, call_timeout_s=0.5, cpu_seconds_per_call=30.0)


# -- helpers -----------------------------------------------------------------------------------

def errors_counted(kind: str, call: str = "step") -> float:
    return metrics.REGISTRY.get_sample_value(
        "opentinker_envhost_env_errors_total", {"env": "misbehaving", "call": call, "kind": kind}) or 0.0


async def misbehaving_session(manager: SessionManager, behaviour: str = "") -> Session:
    session = await manager.open("misbehaving", {})
    if not behaviour.startswith("reset:"):
        await manager.reset(session.session_id, {"behaviour": behaviour})
    return session


async def beside_a_healthy_session(manager: SessionManager, call: Awaitable[Any]) -> EnvHostError:
    """Run `call` (which must fail) while an echo session keeps stepping; the failure, after
    checking that every healthy step was answered right, during the call and after it."""
    healthy = await manager.open("echo", {"turns": 10**6})
    await manager.reset(healthy.session_id, {"word": "fine"})
    done, rewards = asyncio.Event(), []

    async def keep_playing() -> None:
        while not done.is_set():
            rewards.append((await manager.step(healthy.session_id, "fine")).reward)
            await asyncio.sleep(0.001)

    player = asyncio.create_task(keep_playing())
    try:
        with pytest.raises(EnvHostError) as caught:
            await call
    finally:
        done.set()
        await player
    rewards.append((await manager.step(healthy.session_id, "fine")).reward)
    assert rewards and set(rewards) == {1.0}
    await manager.close(healthy.session_id)
    return caught.value


async def close_and_check_reaped(manager: SessionManager, session: Session) -> None:
    pid = session.game.pid  # type: ignore[attr-defined]
    await manager.close(session.session_id)
    assert not alive(pid), f"game process {pid} outlived its session"


def crash_of(loop: asyncio.AbstractEventLoop, manager: SessionManager, kind: str) -> EnvironmentCrashed:
    """Step a game that misbehaves as `kind`; the session must be broken, its process reaped."""
    async def scenario() -> EnvironmentCrashed:
        session = await misbehaving_session(manager)
        error = await beside_a_healthy_session(manager, manager.step(session.session_id, f"misbehave:{kind}"))
        assert isinstance(error, EnvironmentCrashed), error
        assert session.state is SessionState.BROKEN
        with pytest.raises(WrongSessionState, match="broken .*close it"):
            await manager.reset(session.session_id, {})
        await close_and_check_reaped(manager, session)
        return error
    return loop.run_until_complete(scenario())


# -- what a game does wrong --------------------------------------------------------------------

def test_a_game_that_raises_fails_the_call_and_its_process_lives_on(loop, sandbox) -> None:
    async def scenario() -> None:
        session = await misbehaving_session(sandbox)
        pid = session.game.pid  # type: ignore[attr-defined]
        error = await beside_a_healthy_session(sandbox, sandbox.step(session.session_id, "misbehave:raise"))
        assert type(error) is EnvironmentFailure
        assert error.message == "Misbehaving.step() raised RuntimeError: misbehaving: raised on purpose"
        assert "_misbehaving_games.py" in error.traceback and "sandbox" not in error.traceback
        assert session.state is SessionState.AWAITING_RESET and alive(pid)
        await sandbox.reset(session.session_id, {})
        assert (await sandbox.step(session.session_id, "ok")).observation == "ok"
        await close_and_check_reaped(sandbox, session)
    loop.run_until_complete(scenario())


def test_a_busy_loop_is_ended_by_the_cpu_time_limit(loop, sandbox) -> None:
    before = errors_counted("cpu_limit")
    error = crash_of(loop, sandbox, "busy")  # the CPU limit (1 s), not the timeout (20 s), ended it
    assert error.message == ("Misbehaving.step() failed: the game's process exceeded its CPU-time limit "
                             "of 1s per call")
    assert error.metric_kind == "cpu_limit" and errors_counted("cpu_limit") == before + 1


def test_a_memory_leak_is_ended_by_the_memory_limit(loop, sandbox) -> None:
    before = errors_counted("memory_limit")
    error = crash_of(loop, sandbox, "leak")
    assert error.message == (f"Misbehaving.step() failed: the game's process exceeded its memory limit "
                             f"of {MEMORY_LIMIT_MB} MiB (MemoryError)")
    assert errors_counted("memory_limit") == before + 1


@pytest.mark.parametrize(("kind", "ending"), [
    ("exit", "exited with code 3"),
    ("segfault", "was killed by signal SIGSEGV"),
])
def test_a_process_that_dies_fails_its_session_saying_how(loop, sandbox, kind: str, ending: str) -> None:
    before = errors_counted("crashed")
    error = crash_of(loop, sandbox, kind)
    assert error.message == f"Misbehaving.step() failed: the game's process {ending}"
    assert errors_counted("crashed") == before + 1


def test_a_frame_over_the_size_limit_gets_the_process_killed(loop, sandbox) -> None:
    error = crash_of(loop, sandbox, "frame_bomb")
    assert "the game's process sent a reply of 2147483648 bytes; the limit is" in error.message
    assert error.message.endswith("it was killed")


@pytest.mark.parametrize(("kind", "problem"), [
    ("non_utf8", r"step\(\) observation is not valid UTF-8 text: 'utf-8' codec can't encode character "
                 r"'\\udcff' in position 9: surrogates not allowed"),
    ("bytes", r"raised TypeError: StepResult.observation must be str, got bytes"),
    ("huge", rf"step\(\) returned 2000000 characters; the limit is {MAX_CHARS}"),
])
def test_invalid_observations_fail_the_call_only(loop, sandbox, kind: str, problem: str) -> None:
    async def scenario() -> None:
        session = await misbehaving_session(sandbox)
        error = await beside_a_healthy_session(sandbox, sandbox.step(session.session_id, f"misbehave:{kind}"))
        assert type(error) is EnvironmentFailure
        assert re.search(problem, error.message), error.message
        error.message.encode("utf-8")  # what a status or ErrorDetail carries is always UTF-8
        assert session.state is SessionState.AWAITING_RESET
        await close_and_check_reaped(sandbox, session)
    loop.run_until_complete(scenario())


def test_a_non_utf8_reset_observation_is_refused_too(loop, sandbox) -> None:
    async def scenario() -> None:
        session = await misbehaving_session(sandbox, "reset:non_utf8")
        error = await beside_a_healthy_session(sandbox, sandbox.reset(session.session_id, {"behaviour": "reset:non_utf8"}))
        assert "reset() observation is not valid UTF-8 text" in error.message
        await close_and_check_reaped(sandbox, session)
    loop.run_until_complete(scenario())


def test_what_a_game_prints_is_logged_with_its_session_not_written_to_our_output(
        loop, sandbox, capfd: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> tuple[str, list[dict[str, Any]]]:
        session = await misbehaving_session(sandbox)
        with structlog.testing.capture_logs() as logs:
            assert (await sandbox.step(session.session_id, "misbehave:print")).observation == "ok"
            await sandbox.close(session.session_id)  # drains the pipe
        return session.session_id, logs
    session_id, logs = loop.run_until_complete(scenario())
    lines = [entry["line"] for entry in logs if entry["event"] == "game_output"]
    assert sorted(lines) == sorted([f"{PRINTED_LINE} {n}" for n in range(5)]
                                   + [f"misbehaving game on stderr {n}" for n in range(5)])
    assert {entry["session_id"] for entry in logs if entry["event"] == "game_output"} == {session_id}
    captured = capfd.readouterr()
    assert PRINTED_LINE not in captured.out + captured.err


def test_a_flood_of_output_is_logged_up_to_the_budget_and_counted(loop, sandbox) -> None:
    async def scenario() -> list[dict[str, Any]]:
        session = await misbehaving_session(sandbox)
        with structlog.testing.capture_logs() as logs:
            assert (await sandbox.step(session.session_id, "misbehave:flood")).observation == "ok"
            await sandbox.close(session.session_id)
        return logs
    logs = loop.run_until_complete(scenario())
    logged = [entry["line"] for entry in logs if entry["event"] == "game_output"]
    dropped = sum(entry["dropped_bytes"] for entry in logs if entry["event"] == "game_output_dropped")
    assert 0 < sum(len(line) + 1 for line in logged) <= LOG_BYTES_PER_WINDOW + MAX_LINE_CHARS + 1
    assert all(len(line) <= MAX_LINE_CHARS for line in logged)
    assert dropped > 10_000_000  # the rest of ~12 MB was read (the game never blocked) and counted


def test_the_output_budget_is_per_window_and_drops_are_reported_when_it_rolls() -> None:
    async def scenario() -> list[dict[str, Any]]:
        now = [0.0]
        read_end, write_end = os.pipe()
        output = GameOutput(read_end, session_id="s1", env_name="misbehaving", clock=lambda: now[0])
        line = b"y" * 999 + b"\n"
        with structlog.testing.capture_logs() as logs:
            output.feed(line * 20)  # 20,000 characters: the budget (16 KiB) logs 17 lines
            now[0] += WINDOW_S
            output.feed(line)  # a new window: logged, after the drop count of the last one
            output.close()
        os.close(write_end)
        return logs
    logs = asyncio.run(scenario())
    assert [entry["event"] for entry in logs] == ["game_output"] * 17 + ["game_output_dropped", "game_output"]
    assert logs[17]["dropped_bytes"] == 3 * 1000 and logs[17]["session_id"] == "s1"


# -- timeouts, cancellation, grandchildren -----------------------------------------------------

def test_a_game_that_sleeps_forever_is_killed_at_the_timeout(loop, impatient) -> None:
    async def scenario() -> None:
        session = await misbehaving_session(impatient)
        pid = session.game.pid  # type: ignore[attr-defined]
        error = await beside_a_healthy_session(impatient, impatient.step(session.session_id, "misbehave:hang"))
        assert type(error) is EnvironmentTimeout
        assert error.message == "Misbehaving.step() did not return within 0.5s; its process was killed"
        assert session.state is SessionState.BROKEN
        assert not wait_until_gone({pid}), "the timed-out game is still running"
        await impatient.close(session.session_id)
    loop.run_until_complete(scenario())


def test_what_a_game_started_dies_with_it(loop, sandbox) -> None:
    async def scenario() -> set[int]:
        session = await misbehaving_session(sandbox)
        pid = session.game.pid  # type: ignore[attr-defined]
        step = asyncio.create_task(sandbox.step(session.session_id, "misbehave:spawn_and_hang"))
        grandchildren = await wait_for_descendants(pid, 1)
        step.cancel()  # the caller gives up: the game is killed with its process group
        with pytest.raises(asyncio.CancelledError):
            await step
        await sandbox.close(session.session_id)
        return grandchildren | {pid}
    started = loop.run_until_complete(scenario())
    assert not wait_until_gone(started), "a process the game started outlived it"


def test_a_cancelled_call_kills_the_game(loop, sandbox) -> None:
    async def scenario() -> None:
        session = await misbehaving_session(sandbox)
        pid = session.game.pid  # type: ignore[attr-defined]
        step = asyncio.create_task(sandbox.step(session.session_id, "misbehave:hang"))
        await asyncio.sleep(0.2)
        step.cancel()
        with pytest.raises(asyncio.CancelledError):
            await step
        assert not wait_until_gone({pid})
        with pytest.raises(WrongSessionState, match="cancelled"):
            await sandbox.step(session.session_id, "ok")
        await sandbox.close(session.session_id)
    loop.run_until_complete(scenario())


# -- the sandbox itself ------------------------------------------------------------------------

def test_many_sessions_need_no_thread_each(loop, sandbox) -> None:
    async def scenario() -> None:
        threads = threading.active_count()
        sessions = await asyncio.gather(*(misbehaving_session(sandbox) for _ in range(48)))
        results = await asyncio.gather(*(sandbox.step(s.session_id, "ok") for s in sessions))
        assert [r.observation for r in results] == ["ok"] * 48
        assert len({s.game.pid for s in sessions}) == 48  # type: ignore[attr-defined]
        assert threading.active_count() <= threads + 1
        await asyncio.gather(*(close_and_check_reaped(sandbox, s) for s in sessions))
    loop.run_until_complete(scenario())


def test_a_lost_fork_server_fails_its_sessions_and_a_new_one_starts() -> None:
    async def scenario() -> None:
        before = descendants(os.getpid())
        manager = SessionManager(catalog_with_test_games(), SessionLimits())
        session = await misbehaving_session(manager)
        game_pid = session.game.pid  # type: ignore[attr-defined]
        os.kill(manager.host.process.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        assert not wait_until_gone({game_pid})  # its death signal
        with pytest.raises(EnvironmentCrashed, match="the game's process (ended|was killed)"):
            await manager.step(session.session_id, "ok")
        again = await misbehaving_session(manager)
        assert (await manager.step(again.session_id, "ok")).observation == "ok"
        await manager.close_all()
        assert not wait_until_gone(descendants(os.getpid()) - before)
    asyncio.run(scenario())


@pytest.mark.parametrize(("isolation", "visible"), [("process", ""), ("thread", "OPENTINKER_API_KEY")])
def test_game_code_cannot_read_the_envhost_api_key_in_its_own_process(
        monkeypatch: pytest.MonkeyPatch, isolation: str, visible: str) -> None:
    monkeypatch.setenv("OPENTINKER_API_KEY", "otk_0123456789abcdef_not-a-real-secret")

    async def scenario() -> str:
        manager = SessionManager(catalog_with_test_games(), SessionLimits(isolation=isolation))
        session = await misbehaving_session(manager)
        seen = (await manager.step(session.session_id, "misbehave:read_secrets")).observation
        await manager.close_all()
        return seen
    assert asyncio.run(scenario()) == visible


def test_close_all_leaves_no_process_behind() -> None:
    async def scenario() -> None:
        manager = SessionManager(catalog_with_test_games(), SessionLimits(call_timeout_s=30))
        before = descendants(os.getpid())
        sessions = [await misbehaving_session(manager) for _ in range(3)]
        hung = asyncio.create_task(manager.step(sessions[0].session_id, "misbehave:spawn_and_hang"))
        started = await wait_for_descendants(os.getpid(), 5, before)  # fork server, 3 games, 1 grandchild
        hung.cancel()
        await manager.close_all()
        assert not wait_until_gone(started)
    asyncio.run(scenario())


# -- a real EnvHost process --------------------------------------------------------------------

@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_no_game_process_outlives_its_envhost(tmp_path: Path, stop: str) -> None:
    envhost = ServiceProcess(ENVHOST, port=free_port(), log_path=tmp_path / "envhost.log",
                             OPENTINKER_ENVHOST_GAMES=GAMES_SETTING, OPENTINKER_ENVHOST_GRACE_SECONDS="0.5")
    try:
        envhost.wait_for_health("SERVING")
        with grpc.insecure_channel(envhost.address) as channel:
            stub = ENVHOST.stub(channel)
            sessions = [stub.OpenSession(pb.OpenSessionRequest(env_name="misbehaving"), timeout=10).session_id
                        for _ in range(3)]
            for session_id in sessions:
                stub.Reset(pb.ResetRequest(session_id=session_id), timeout=10)
            with pytest.raises(grpc.RpcError) as crashed:
                stub.Step(pb.StepRequest(session_id=sessions[1], action="misbehave:exit"), timeout=10)
            assert crashed.value.code() == grpc.StatusCode.INTERNAL
            assert dict(crashed.value.trailing_metadata())["opentinker-env-error-kind"] == "crashed"
            sessions[1] = stub.OpenSession(pb.OpenSessionRequest(env_name="misbehaving"), timeout=10).session_id
            hung = stub.Step.future(pb.StepRequest(session_id=sessions[0], action="misbehave:spawn_and_hang"),
                                    timeout=30)
            deadline = time.monotonic() + 15
            while len(descendants(envhost.process.pid)) < 5 and time.monotonic() < deadline:
                time.sleep(0.05)  # fork server, 3 games, the hung game's grandchild
            started = descendants(envhost.process.pid)
            assert len(started) == 5, envhost.log_text()
            envhost.process.send_signal(signal.Signals[stop])
            exit_code = envhost.process.wait(timeout=20)
            hung.cancel()
    finally:
        envhost.kill()
    assert exit_code == (0 if stop == "SIGTERM" else -signal.SIGKILL)
    assert not wait_until_gone(started), f"left behind: {started}\n{envhost.log_text()[-3000:]}"
