"""Every value a caller controls is clipped in log lines: a 1 MiB id (or error text quoting it)
makes a log line of bounded size, in-process and from the real Trainer and Coordinator."""

from __future__ import annotations

import io
import json
import logging

import grpc
import pytest
import structlog

from opentinker_api.common.v1.resources_pb2 import LeaseContext
from opentinker_api.coordinator.v1 import coordinator_service_pb2 as coordinator_pb
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker_runtime.core.log_bounds import MAX_LINE_CHARS
from opentinker_runtime.core.logging import configure_logging
from tests._services import SERVICES, ServiceProcess
from harness.stack import free_ports

pytestmark = pytest.mark.timeout(120)

HUGE_ID = "x" * (1 << 20)
TAIL = "-the-end"


@pytest.fixture
def captured():
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    stream = io.StringIO()
    yield stream
    structlog.reset_defaults()
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)


def test_long_values_keys_items_and_tracebacks_are_clipped(captured: io.StringIO) -> None:
    configure_logging("info", "json", service="s", stream=captured)
    log = structlog.get_logger("test")
    log.info("rpc_refused", session_id=HUGE_ID + TAIL, nested={"ids": [HUGE_ID] * 3, HUGE_ID: 1},
             many=list(range(100_000)), blob=HUGE_ID.encode())
    logging.getLogger("grpc").warning("peer sent %s", HUGE_ID)
    try:
        raise KeyError(HUGE_ID + TAIL)
    except KeyError:
        log.exception("failed", job_id="j1")
    lines = captured.getvalue().splitlines()
    assert len(lines) == 3
    assert all(len(line) <= MAX_LINE_CHARS for line in lines), [len(line) for line in lines]
    refused, stdlib, failed = (json.loads(line) for line in lines)
    assert refused["session_id"].startswith("xxxx") and refused["session_id"].endswith(TAIL)
    assert "chars clipped" in refused["session_id"]
    assert "more items" in str(refused["many"][-1])
    assert "chars clipped" in stdlib["event"]
    assert failed["job_id"] == "j1"  # short values stay as they are
    assert failed["exception"].startswith("Traceback") and failed["exception"].endswith(f"{TAIL}'")


def test_short_values_and_their_types_are_untouched(captured: io.StringIO) -> None:
    configure_logging("info", "json", service="s", stream=captured)
    structlog.get_logger().info("ok", n=3, ratio=0.5, ids=["a", "b"], labels={"k": "v"}, flag=True)
    line = json.loads(captured.getvalue())
    assert (line["n"], line["ratio"], line["ids"], line["labels"], line["flag"]) == (3, 0.5, ["a", "b"],
                                                                                  {"k": "v"}, True)


def calls_with_a_huge_id(name: str, channel: grpc.Channel) -> None:
    """Calls of `name` whose id the service logs (and quotes in its error)."""
    case = next(c for c in SERVICES if c.name == name)
    stub = case.stub(channel)
    attempts = {
        "trainer": [lambda: stub.GetSession(trainer_pb.GetSessionRequest(session_id=HUGE_ID), timeout=10),
                    lambda: stub.CloseSession(trainer_pb.CloseSessionRequest(session_id=HUGE_ID), timeout=10)],
        "coordinator": [lambda: stub.StartRun(coordinator_pb.StartRunRequest(
                            lease=LeaseContext(job_id=HUGE_ID, lease_id=HUGE_ID, fencing_token=1),
                            request_id=HUGE_ID), timeout=10),
                        lambda: stub.GetRun(coordinator_pb.GetRunRequest(job_id=HUGE_ID), timeout=10)],
    }[name]
    for attempt in attempts:
        try:
            attempt()
        except grpc.RpcError as refused:
            assert refused.code() != grpc.StatusCode.OK


@pytest.mark.parametrize("name", ["trainer", "coordinator"])
def test_a_service_logs_a_1_mib_id_in_bounded_lines(name: str, tmp_path) -> None:
    port = free_ports(1)[0]
    case = next(c for c in SERVICES if c.name == name)
    nowhere = f"127.0.0.1:{free_ports(1)[0]}"  # the coordinator's run fails to reach its scheduler
    peers = {"OPENTINKER_COORDINATOR_SCHEDULER_ADDRESS": nowhere} if name == "coordinator" else {}
    service = ServiceProcess(case, port=port, log_path=tmp_path / f"{name}.log",
                             OPENTINKER_CHECKPOINT_DIR=str(tmp_path / "checkpoints"), **peers)
    try:
        service.wait_for_health("SERVING", timeout=60)
        options = [("grpc.max_send_message_length", 8 << 20), ("grpc.max_receive_message_length", 8 << 20)]
        with grpc.insecure_channel(service.address, options=options) as channel:
            calls_with_a_huge_id(name, channel)
        assert service.terminate(timeout=30) == 0
    finally:
        service.kill()
    lines = service.log_text().splitlines()
    assert any("xxxxxxxx" in line for line in lines), "the refused calls were not logged at all"
    longest = max(len(line) for line in lines)
    assert longest <= MAX_LINE_CHARS, f"a {longest}-character log line"
