"""The Prometheus endpoint every server has, in-process with real sockets: RPCs counted by
method and status code and timed, /metrics in the text format over real HTTP, collectors read
at scrape time, a clear error for a taken port, and the endpoint gone after stop. Then how
`opentinker up` gives each service its metrics port and `status` shows it."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import grpc
import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as pb_grpc
from opentinker.cli import state
from opentinker.cli.errors import PortInUse
from opentinker.cli.launcher import UpConfig, assign_metrics_ports
from opentinker.cli.main import _print_statuses
from opentinker.cli.stack import ProcessStatus
from opentinker.cli.topology import AUTO_PORT, SERVICE_NAMES, SERVICES, resolve_metrics_ports, service_env
from opentinker_runtime.core.errors import PortInUseError, SettingsError
from opentinker_runtime.core.metrics_http import MetricsEndpoint
from opentinker_runtime.core.server import ServerPlan, ServiceBinding, StartedServer, start_server, stop_server
from opentinker_runtime.core.settings import ServiceSettings, load_settings, port_setting, setting
from harness.stack import free_ports

pytestmark = pytest.mark.timeout(60)
ENVHOST = "opentinker.envhost.v1.EnvHostService"


@dataclass(frozen=True, kw_only=True)
class MeteredSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_METERED_"
    port: int = port_setting(0)
    auth: str = setting("disabled", "Off: these tests are about metrics, not auth.",
                        choices=("api_keys", "disabled"), env="OPENTINKER_AUTH")


class ScriptedEnvHost(pb_grpc.EnvHostServiceServicer):
    """ListEnvironments answers; OpenSession aborts NOT_FOUND; Step crashes; Reset sleeps past
    any short deadline; Interact echoes one response per request (a bidirectional stream)."""

    async def ListEnvironments(self, request, context):  # noqa: ANN001, ANN201
        return pb.ListEnvironmentsResponse()

    async def OpenSession(self, request, context):  # noqa: ANN001, ANN201
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such environment")

    async def Step(self, request, context):  # noqa: ANN001, ANN201
        raise RuntimeError("a bug in the handler")

    async def Reset(self, request, context):  # noqa: ANN001, ANN201
        await asyncio.sleep(5)
        return pb.ResetResponse()

    async def Interact(self, request_iterator, context) -> AsyncIterator[pb.InteractResponse]:  # noqa: ANN001
        async for _ in request_iterator:
            yield pb.InteractResponse()


class QueueDepth:
    """A collector read at scrape time, like the Scheduler's Redis gauges."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def collect(self):  # noqa: ANN201
        yield GaugeMetricFamily("opentinker_test_queue_depth", "Test queue depth.", value=self.depth)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def fetch(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition, keyed by (sample name, its labels)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, frozenset(labels.items())), 0.0)


def calls(scraped: dict, method: str, code: str) -> float:
    return value(scraped, "opentinker_grpc_requests_total", grpc_service=ENVHOST, grpc_method=method,
                 grpc_code=code)


async def scrape(started: StartedServer) -> dict[tuple[str, frozenset], float]:
    status, content_type, body = await asyncio.to_thread(fetch, started.metrics.url)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    return samples(body)


async def scrape_until(started: StartedServer, done: Callable[[dict], bool]) -> dict:
    """Scrape until `done` holds (the server may finish a call a moment after its client)."""
    deadline = asyncio.get_running_loop().time() + 5
    while not done(scraped := await scrape(started)) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    return scraped


async def start(collectors: tuple = ()) -> StartedServer:
    binding = ServiceBinding(full_name=ENVHOST, servicer=ScriptedEnvHost(),
                             add_to_server=pb_grpc.add_EnvHostServiceServicer_to_server)
    settings = MeteredSettings(metrics_port=free_ports(1)[0])
    return await start_server(settings, ServerPlan(services=[binding], collectors=collectors))


async def make_calls(address: str) -> None:
    """2 OK, 1 NOT_FOUND, 1 UNKNOWN, 1 DEADLINE_EXCEEDED, 1 OK stream of 3 messages."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.EnvHostServiceStub(channel)
        await stub.ListEnvironments(pb.ListEnvironmentsRequest(), timeout=5)
        await stub.ListEnvironments(pb.ListEnvironmentsRequest(), timeout=5)
        for rpc, request, timeout in ((stub.OpenSession, pb.OpenSessionRequest(), 5),
                                      (stub.Step, pb.StepRequest(), 5), (stub.Reset, pb.ResetRequest(), 0.2)):
            with pytest.raises(grpc.aio.AioRpcError):
                await rpc(request, timeout=timeout)
        replies = [r async for r in stub.Interact(iter([pb.InteractRequest()] * 3), timeout=5)]
        assert len(replies) == 3


def test_every_rpc_is_counted_by_method_and_status_code_and_timed() -> None:
    async def scenario() -> None:
        started = await start()
        try:
            before = await scrape(started)
            await make_calls(f"127.0.0.1:{started.port}")
            after = await scrape_until(started, lambda now: calls(now, "Reset", "DEADLINE_EXCEEDED")
                                       > calls(before, "Reset", "DEADLINE_EXCEEDED"))
        finally:
            await stop_server(started, grace_seconds=1)
        expected = {("ListEnvironments", "OK"): 2, ("OpenSession", "NOT_FOUND"): 1, ("Step", "UNKNOWN"): 1,
                    ("Reset", "DEADLINE_EXCEEDED"): 1, ("Interact", "OK"): 1}
        for (method, code), count in expected.items():
            assert calls(after, method, code) - calls(before, method, code) == count, (method, code)
        assert calls(after, "ListEnvironments", "UNKNOWN") == calls(before, "ListEnvironments", "UNKNOWN")
        timed = {"grpc_service": ENVHOST, "grpc_method": "ListEnvironments"}
        count_delta = (value(after, "opentinker_grpc_request_seconds_count", **timed)
                       - value(before, "opentinker_grpc_request_seconds_count", **timed))
        assert count_delta == 2
        assert value(after, "opentinker_grpc_request_seconds_bucket", le="+Inf", **timed) == \
            value(after, "opentinker_grpc_request_seconds_count", **timed)
        reset = {"grpc_service": ENVHOST, "grpc_method": "Reset"}
        assert value(after, "opentinker_grpc_request_seconds_sum", **reset) >= 0.15  # it waited for its deadline
        assert value(after, "process_resident_memory_bytes") > 0

    run(scenario)


def test_collectors_of_the_plan_are_read_at_scrape_time_while_the_server_runs() -> None:
    async def scenario() -> None:
        queue = QueueDepth(3)
        started = await start(collectors=(queue,))
        try:
            assert value(await scrape(started), "opentinker_test_queue_depth") == 3
            queue.depth = 5
            assert value(await scrape(started), "opentinker_test_queue_depth") == 5
        finally:
            await stop_server(started, grace_seconds=1)
        probe = await start()
        try:
            assert ("opentinker_test_queue_depth", frozenset()) not in await scrape(probe)
        finally:
            await stop_server(probe, grace_seconds=1)

    run(scenario)


def test_the_endpoint_serves_metrics_only_at_its_path_and_closes_on_stop() -> None:
    endpoint = MetricsEndpoint.start("127.0.0.1", 0, env_var="OPENTINKER_X_METRICS_PORT")
    try:
        assert endpoint.port > 0 and endpoint.url == f"http://127.0.0.1:{endpoint.port}/metrics"
        status, content_type, body = fetch(endpoint.url)
        assert status == 200 and "# TYPE opentinker_grpc_requests_total counter" in body
        assert fetch(f"http://127.0.0.1:{endpoint.port}/")[0] == 200
        assert fetch(f"http://127.0.0.1:{endpoint.port}/nope")[0] == 404
    finally:
        endpoint.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(endpoint.url, timeout=2)


def test_a_taken_metrics_port_fails_start_naming_the_address_and_its_variable() -> None:
    async def scenario() -> None:
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", 0))
            squatter.listen()
            port = squatter.getsockname()[1]
            with pytest.raises(PortInUseError) as caught:
                await start_server(MeteredSettings(metrics_port=port), ServerPlan(services=[]))
        assert caught.value.env_var == "OPENTINKER_METERED_METRICS_PORT"
        assert f"cannot listen on 127.0.0.1:{port}" in str(caught.value)
        assert "OPENTINKER_METERED_METRICS_PORT" in str(caught.value)

    run(scenario)


def test_metrics_port_setting_is_read_from_the_service_prefix_and_validated() -> None:
    environ = {"OPENTINKER_METERED_METRICS_PORT": "9464"}
    assert load_settings(MeteredSettings, environ).metrics_port == 9464
    assert MeteredSettings().metrics_port == 0  # default: no endpoint
    with pytest.raises(SettingsError, match="OPENTINKER_METERED_METRICS_PORT='70000' is invalid"):
        load_settings(MeteredSettings, {"OPENTINKER_METERED_METRICS_PORT": "70000"})


# ---------------------------------------------------------------- the local stack's metrics ports


def up_config(tmp_path, *, ports: dict[str, int], metrics_ports: dict[str, int]) -> UpConfig:
    return UpConfig(state_dir=tmp_path, host="127.0.0.1", ports=ports, port_flags={}, redis_port=ports["redis"],
                    redis_url=None, timeout=1, metrics_ports=metrics_ports)


def test_metrics_ports_resolve_explicit_then_base_then_auto() -> None:
    assert resolve_metrics_ports({}, None) == dict.fromkeys(SERVICE_NAMES, AUTO_PORT)
    assert resolve_metrics_ports({"rollout": 9999}, 9100) == {
        "scheduler": 9100, "trainer": 9101, "rollout": 9999, "envhost": 9103, "coordinator": 9104}


def test_up_picks_distinct_free_metrics_ports_apart_from_the_grpc_and_redis_ports(tmp_path) -> None:
    grpc = dict(zip((*SERVICE_NAMES, "redis"), free_ports(len(SERVICE_NAMES) + 1), strict=True))
    explicit = free_ports(1)[0]
    assigned = assign_metrics_ports(up_config(tmp_path, ports=grpc, metrics_ports={"trainer": explicit}))
    assert assigned["trainer"] == explicit
    assert AUTO_PORT not in assigned.values() and len(set(assigned.values())) == len(SERVICE_NAMES)
    assert set(assigned.values()).isdisjoint(grpc.values())
    env = service_env(SERVICES[1], host="127.0.0.1", ports=grpc, redis_url="redis://127.0.0.1:1/0",
                      checkpoint_dir="/tmp", api_key="", metrics_ports=assigned)
    assert env["OPENTINKER_TRAINER_METRICS_PORT"] == str(explicit)


def test_up_refuses_a_taken_or_doubly_given_metrics_port_naming_its_flag(tmp_path) -> None:
    grpc = dict(zip((*SERVICE_NAMES, "redis"), free_ports(len(SERVICE_NAMES) + 1), strict=True))
    with pytest.raises(PortInUse, match=r"given to both scheduler and rollout metrics; change it with "
                                        r"--rollout-metrics-port \(or --metrics-base-port\)"):
        assign_metrics_ports(up_config(tmp_path, ports=grpc, metrics_ports={"rollout": grpc["scheduler"]}))
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        with pytest.raises(PortInUse, match=rf"port {taken} \(envhost metrics\) is already in use"):
            assign_metrics_ports(up_config(tmp_path, ports=grpc, metrics_ports={"envhost": taken}))


def test_a_stack_json_from_before_metrics_still_loads_and_shows_no_metrics_url(tmp_path, capsys) -> None:
    old = {"host": "127.0.0.1", "redis_url": "redis://127.0.0.1:6390/0", "redis_external": False, "version": 1,
           "processes": [{"name": "scheduler", "address": "127.0.0.1:50051", "pid": 1, "start_ticks": None,
                          "command": ["python"], "log": "logs/scheduler.log"}]}
    (tmp_path / "stack.json").write_text(json.dumps(old))
    record = state.load(tmp_path)
    assert record.processes[0].metrics_address == ""
    statuses = [ProcessStatus(name="scheduler", address="127.0.0.1:50051", pid=1, alive=False, health="DOWN")]
    _print_statuses(argparse.Namespace(json=True, state_dir=tmp_path), record, statuses)
    assert "metrics_url" not in json.loads(capsys.readouterr().out)["processes"][0]
    record.processes[0].metrics_address = "127.0.0.1:9151"
    _print_statuses(argparse.Namespace(json=False, state_dir=tmp_path), record, statuses)
    assert "http://127.0.0.1:9151/metrics" in capsys.readouterr().out.splitlines()[2].split()


def test_docs_list_every_metric_the_services_define() -> None:
    from opentinker_scheduler.metrics import ClusterSnapshot, snapshot_families

    from opentinker_runtime.core.metrics import REGISTRY

    for service in ("trainer", "rollout", "envhost", "coordinator"):
        importlib.import_module(f"opentinker_{service}.metrics")  # defines its metrics on import
    snapshot = ClusterSnapshot(queued_jobs=0, running_jobs=0, active_leases=0, registered_workers=0,
                               live_workers=0, usage={})
    families = [*REGISTRY.collect(), *snapshot_families(snapshot)]
    names = {f.name + "_total" if f.type == "counter" else f.name for f in families if f.name.startswith("opentinker_")}
    assert {"opentinker_grpc_requests_total", "opentinker_scheduler_job_state_changes_total",
            "opentinker_scheduler_queue_depth", "opentinker_trainer_optimizer_steps_total"} <= names
    docs = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    missing = sorted(name for name in names if f"`{name}`" not in docs)
    assert not missing, f"docs/metrics.md does not list {missing}"
