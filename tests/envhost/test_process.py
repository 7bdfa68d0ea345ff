"""The EnvHost as a real process serving a user game loaded by import path from a module
that exists only in a temporary folder; a broken `games` setting stops it with exit code 2."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_runtime.core.embedded_redis import free_port
from tests._services import SERVICES, ServiceProcess
from tests.envhost._user_games import user_games  # noqa: F401 - the fixture

ENVHOST = next(case for case in SERVICES if case.name == "envhost")


@pytest.fixture
def envhost(user_games: Path, tmp_path: Path) -> Iterator[ServiceProcess]:
    process = ServiceProcess(ENVHOST, port=free_port(), log_path=tmp_path / "envhost.log",
                             PYTHONPATH=str(user_games),
                             OPENTINKER_ENVHOST_GAMES="guess=ot_user_games_test:GuessGame")
    try:
        process.wait_for_health("SERVING")
        yield process
    finally:
        process.kill()


def test_serves_a_user_game_by_import_path(envhost: ServiceProcess) -> None:
    with grpc.insecure_channel(envhost.address) as channel:
        stub = ENVHOST.stub(channel)
        listed = stub.ListEnvironments(pb.ListEnvironmentsRequest(), timeout=5)
        guess = {env.name: env for env in listed.environments}["guess"]
        assert guess.source == "ot_user_games_test:GuessGame" and guess.multi_turn
        assert guess.description == "Guess the secret number; the game says higher or lower."
        opened = stub.OpenSession(pb.OpenSessionRequest(env_name="guess"), timeout=5)
        request = pb.ResetRequest(session_id=opened.session_id)
        request.kwargs.update({"secret": 7})
        reset = stub.Reset(request, timeout=5)
        assert (reset.system_prompt, reset.initial_user_message, reset.observation) == (
            "Guess a number from 1 to 9.", "Your guess?", "")
        observations = [stub.Step(pb.StepRequest(session_id=opened.session_id, action=guess),
                                  timeout=5).observation for guess in ("3", "9", "7")]
        assert observations == ["higher", "lower", "right"]
        error = _step_error(stub, opened.session_id, "7")
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert envhost.terminate(timeout=10) == 0
    assert '"event": "games_loaded"' in envhost.log_text()


def test_a_game_that_raises_in_the_process_reports_its_traceback(envhost: ServiceProcess) -> None:
    with grpc.insecure_channel(envhost.address) as channel:
        stub = ENVHOST.stub(channel)
        opened = stub.OpenSession(pb.OpenSessionRequest(env_name="guess"), timeout=5)
        stub.Reset(pb.ResetRequest(session_id=opened.session_id), timeout=5)
        error = _step_error(stub, opened.session_id, "seven")
        assert error.code() == grpc.StatusCode.INTERNAL
        assert "GuessGame.step() raised ValueError" in error.details()
        traceback = dict(error.trailing_metadata())["opentinker-traceback-bin"].decode()
        assert "ot_user_games_test.py" in traceback and "guess = int(action)" in traceback
        assert stub.ListEnvironments(pb.ListEnvironmentsRequest(), timeout=5).environments


def test_a_bad_games_setting_exits_2_naming_the_entry(user_games: Path, tmp_path: Path) -> None:
    process = ServiceProcess(ENVHOST, port=free_port(), log_path=tmp_path / "log",
                             PYTHONPATH=str(user_games),
                             OPENTINKER_ENVHOST_GAMES="guess=ot_user_games_test:Nope")
    exit_code = process.process.wait(timeout=15)
    log = process.log_text()
    assert exit_code == 2, log
    assert "OPENTINKER_ENVHOST_GAMES=" in log
    assert "guess=ot_user_games_test:Nope: module 'ot_user_games_test' has no attribute 'Nope'" in log


def _step_error(stub: object, session_id: str, action: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        stub.Step(pb.StepRequest(session_id=session_id, action=action), timeout=5)  # type: ignore[attr-defined]
    return caught.value
