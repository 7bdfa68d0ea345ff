"""Each of the five services as a real process: health, reflection, bad-input statuses,
graceful SIGTERM, a taken port, and the scheduler waiting for Redis."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor
from grpc_health.v1 import health
from grpc_reflection.v1alpha import reflection

from opentinker_runtime.core.embedded_redis import EmbeddedRedis, free_port
from tests._services import SERVICES, ServiceCase, ServiceProcess, reflected_services

GRACE_SECONDS = 2.0
EXIT_WAIT_S = 60
"""How long a refused start may take to exit: the Trainer and Rollout import torch and
transformers first (~12 s alone on 2 cores, and a clean-clone CI run once took over 15 s)."""
SCHEDULER = SERVICES[0]


def serving_process(case: ServiceCase, redis_url: str, log_dir: Path) -> ServiceProcess:
    """One service on a free port, pointed at `redis_url`, SERVING."""
    process = ServiceProcess(case, port=free_port(), log_path=log_dir / f"{case.name}.log",
                             OPENTINKER_REDIS_URL=redis_url,
                             **{f"{case.env_prefix}GRACE_SECONDS": str(GRACE_SECONDS)})
    try:
        process.wait_for_health("SERVING")
    except BaseException:
        process.kill()
        raise
    return process


@pytest.fixture(scope="module", params=SERVICES, ids=[case.name for case in SERVICES])
def service(request: pytest.FixtureRequest, redis_server, tmp_path_factory) -> Iterator[ServiceProcess]:  # noqa: ANN001
    """One process per service, shared by the tests that only ask it questions; on a Redis
    database of its own (15), which the other tests' FLUSHDB of database 0 never touches."""
    case: ServiceCase = request.param
    process = serving_process(case, redis_server.url.rsplit("/", 1)[0] + "/15", tmp_path_factory.mktemp(case.name))
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture(params=SERVICES, ids=[case.name for case in SERVICES])
def fresh_service(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Iterator[ServiceProcess]:
    """A service of the test's own (it will be stopped)."""
    process = serving_process(request.param, redis_url, tmp_path)
    try:
        yield process
    finally:
        process.kill()


def test_health_is_serving_for_server_and_service(service: ServiceProcess) -> None:
    assert service.health("") == "SERVING"
    assert service.health(service.case.full_name) == "SERVING"
    assert service.health("opentinker.no.such.Service") == "NOT_FOUND"


def test_reflection_lists_service_health_and_reflection(service: ServiceProcess) -> None:
    names = reflected_services(service.address)
    assert sorted(names) == sorted([service.case.full_name, health.SERVICE_NAME,
                                    reflection.SERVICE_NAME])


# RPCs not built yet (README "Live RPCs"); every other RPC is live.
NOT_YET_LIVE = {
    "Coordinator": {"ResumeRun"},
}
# An empty request is bad input: it must get one of these, never UNKNOWN or INTERNAL.
CANONICAL_REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                      grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED}


def test_empty_requests_get_canonical_errors_and_unbuilt_rpcs_say_so(service: ServiceProcess) -> None:
    descriptor = service.case.pb2().DESCRIPTOR.services_by_name[f"{service.case.area}Service"]
    assert descriptor.full_name == service.case.full_name
    not_live = NOT_YET_LIVE.get(service.case.area, set())
    with grpc.insecure_channel(service.address) as channel:
        stub = service.case.stub(channel)
        for method in descriptor.methods:
            error = _call_expecting_error(stub, method)
            if error is None:  # valid as it is: a List with defaults, an empty stream
                assert method.name not in not_live
                continue
            if method.name in not_live:
                assert error.code() == grpc.StatusCode.UNIMPLEMENTED, method.name
                assert f"{service.case.full_name}/{method.name} is not implemented yet" in error.details()
            else:
                assert error.code() in CANONICAL_REFUSALS - {grpc.StatusCode.UNIMPLEMENTED}, \
                    (method.name, error.code(), error.details())
                assert error.details(), method.name
    assert service.health("") == "SERVING"
    assert service.process.poll() is None


def test_sigterm_stops_gracefully_with_exit_code_0(fresh_service: ServiceProcess) -> None:
    started = time.monotonic()
    exit_code = fresh_service.terminate(timeout=GRACE_SECONDS + 5)
    assert exit_code == 0, fresh_service.log_text()
    assert time.monotonic() - started < GRACE_SECONDS + 5
    log = fresh_service.log_text()
    assert '"event": "signal_received"' in log and '"signal": "SIGTERM"' in log
    assert '"event": "shutdown_complete"' in log


@pytest.mark.parametrize("case", SERVICES, ids=[case.name for case in SERVICES])
def test_taken_port_exits_2_quickly_naming_port_and_env_var(case: ServiceCase, tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        process = ServiceProcess(case, port=port, log_path=tmp_path / "log")
        try:
            exit_code = process.process.wait(timeout=EXIT_WAIT_S)
        finally:
            process.kill()
    log = process.log_text()
    assert exit_code == 2, log
    assert f"127.0.0.1:{port}" in log
    assert f"{case.env_prefix}PORT" in log
    records = [json.loads(line) for line in log.splitlines()]  # every line is structured
    errors = [record for record in records if record["level"] == "error"]
    assert [record["event"] for record in errors] == ["port_in_use"]
    assert errors[0]["env_var"] == f"{case.env_prefix}PORT"


def test_bad_setting_exits_2_with_a_message_naming_the_variable(tmp_path: Path) -> None:
    process = ServiceProcess(SERVICES[1], port=free_port(), log_path=tmp_path / "log",
                             OPENTINKER_TRAINER_LOG_LEVL="debug")
    exit_code = process.process.wait(timeout=EXIT_WAIT_S)
    log = process.log_text()
    assert exit_code == 2, log
    assert "OPENTINKER_TRAINER_LOG_LEVL is not a known setting" in log
    assert "did you mean OPENTINKER_TRAINER_LOG_LEVEL?" in log


def test_scheduler_is_not_serving_until_redis_answers(tmp_path: Path) -> None:
    redis_port = free_port()
    scheduler = ServiceProcess(SCHEDULER, port=free_port(), log_path=tmp_path / "scheduler.log",
                               OPENTINKER_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
                               OPENTINKER_SCHEDULER_REDIS_CHECK_SECONDS="0.2")
    try:
        scheduler.wait_for_health("NOT_SERVING")
        _assert_stays_not_serving(scheduler, seconds=1.5)
        assert '"event": "redis_unreachable"' in scheduler.log_text()
        with EmbeddedRedis(port=redis_port, appendonly=False):
            assert scheduler.wait_for_health("SERVING", timeout=10) < 10
            assert scheduler.health(SCHEDULER.full_name) == "SERVING"
        scheduler.wait_for_health("NOT_SERVING", timeout=10)
        assert '"event": "redis_lost"' in scheduler.log_text()
        assert scheduler.terminate(timeout=10) == 0
    finally:
        scheduler.kill()


def _assert_stays_not_serving(process: ServiceProcess, *, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.health("") == "NOT_SERVING"
        assert process.health(process.case.full_name) == "NOT_SERVING"
        assert process.process.poll() is None, "the scheduler must not exit while Redis is down"
        time.sleep(0.2)


def _call_expecting_error(stub: object, method: MethodDescriptor) -> grpc.RpcError | None:
    """Call `method` with an empty request the way its streaming kind requires."""
    request = message_factory.GetMessageClass(method.input_type)()
    call = getattr(stub, method.name)
    argument = iter([request]) if method.client_streaming else request
    try:
        result = call(argument, timeout=5.0)
        if method.server_streaming:
            list(result)
    except grpc.RpcError as error:
        return error
    return None  # the empty request was valid (a List with defaults, an empty Interact stream)
