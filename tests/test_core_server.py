"""The shared server bootstrap, in-process with real sockets: bind, health, graceful stop,
close hooks, start hooks, and the servicer base's UNIMPLEMENTED RPCs."""

from __future__ import annotations

import asyncio
import inspect
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from opentinker_api.envhost.v1 import envhost_service_pb2 as envhost_pb2
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as envhost_grpc
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as rollout_grpc
from opentinker_runtime.core.errors import PortInUseError
from opentinker_runtime.core.server import (
    HealthReporter,
    ServerPlan,
    ServiceBinding,
    format_address,
    serve,
    start_server,
    stop_server,
)
from opentinker_runtime.core.settings import ServiceSettings, port_setting, setting
from opentinker_runtime.edge.handlers import servicer_base

ENVHOST = "opentinker.envhost.v1.EnvHostService"
ROLLOUT = "opentinker.rollout.v1.RolloutService"
ROLLOUT_SERVICE = rollout_pb2.DESCRIPTOR.services_by_name["RolloutService"]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass(frozen=True, kw_only=True)
class InProcessSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_INPROC_"
    port: int = port_setting(0)
    auth: str = setting("disabled", "Off: these tests are about serving, not auth (tests/test_auth.py).",
                        choices=("api_keys", "disabled"), env="OPENTINKER_AUTH")


class SlowEnvHost(envhost_grpc.EnvHostServiceServicer):
    """ListEnvironments answers after `delay` seconds; counts finished calls."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.finished = 0

    async def ListEnvironments(self, request: object,
                               context: object) -> envhost_pb2.ListEnvironmentsResponse:
        await asyncio.sleep(self.delay)
        self.finished += 1
        return envhost_pb2.ListEnvironmentsResponse()


def envhost_binding(servicer: object) -> ServiceBinding:
    return ServiceBinding(full_name=ENVHOST, servicer=servicer,
                          add_to_server=envhost_grpc.add_EnvHostServiceServicer_to_server)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


async def check(address: str, service: str = "") -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        return (await health_pb2_grpc.HealthStub(channel).Check(request, timeout=2)).status


def test_the_servicer_base_subclasses_the_generated_base_with_async_rpcs() -> None:
    servicer = servicer_base(rollout_grpc.RolloutServiceServicer, ROLLOUT_SERVICE)()
    assert isinstance(servicer, rollout_grpc.RolloutServiceServicer)
    names = [method.name for method in ROLLOUT_SERVICE.methods]
    assert all(inspect.iscoroutinefunction(getattr(servicer, name)) for name in names)


def test_unimplemented_rpcs_of_every_streaming_kind_abort_in_process() -> None:
    async def scenario() -> None:
        servicer = servicer_base(rollout_grpc.RolloutServiceServicer, ROLLOUT_SERVICE)()
        binding = ServiceBinding(full_name=ROLLOUT, servicer=servicer,
                                 add_to_server=rollout_grpc.add_RolloutServiceServicer_to_server)
        started = await start_server(InProcessSettings(), ServerPlan(services=[binding]))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{started.port}") as channel:
                stub = rollout_grpc.RolloutServiceStub(channel)
                calls = {  # unary, server-streaming and client-streaming
                    "Sample": lambda: stub.Sample(rollout_pb2.SampleRequest()),
                    "RunEpisodes": lambda: _drain(stub.RunEpisodes(rollout_pb2.RunEpisodesRequest())),
                    "UpdateWeights": lambda: stub.UpdateWeights(_one(rollout_pb2.UpdateWeightsRequest())),
                }
                for name, call in calls.items():
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await call()
                    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
                    assert caught.value.details() == (f"{ROLLOUT}/{name} is not implemented yet; "
                                                      "see README 'Live RPCs'")
        finally:
            await stop_server(started, grace_seconds=1)

    run(scenario)


def test_port_zero_binds_a_free_port_and_reports_serving() -> None:
    async def scenario() -> None:
        started = await start_server(InProcessSettings(), ServerPlan(services=[]))
        try:
            assert started.port > 0
            assert await check(f"127.0.0.1:{started.port}") == SERVING
        finally:
            await stop_server(started, grace_seconds=1)

    run(scenario)


def test_taken_port_raises_port_in_use_naming_address_and_env_var() -> None:
    async def scenario() -> None:
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", 0))
            squatter.listen()
            port = squatter.getsockname()[1]
            with pytest.raises(PortInUseError) as caught:
                await start_server(InProcessSettings(port=port), ServerPlan(services=[]))
        assert caught.value.address == f"127.0.0.1:{port}"
        assert caught.value.env_var == "OPENTINKER_INPROC_PORT"
        assert f"127.0.0.1:{port}" in str(caught.value) and "OPENTINKER_INPROC_PORT" in str(caught.value)

    run(scenario)


def test_a_host_that_is_not_local_raises_port_in_use_too() -> None:
    async def scenario() -> None:
        with pytest.raises(PortInUseError, match=r"cannot listen on 192\.0\.2\.1:\d+"):
            await start_server(InProcessSettings(host="192.0.2.1", port=_port_of_free_socket()),
                               ServerPlan(services=[]))

    run(scenario)


def test_close_hooks_run_even_when_binding_fails() -> None:
    closed: list[str] = []

    async def close() -> None:
        closed.append("closed")

    async def scenario() -> None:
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", 0))
            squatter.listen()
            plan = ServerPlan(services=[], close_hooks=[close])
            with pytest.raises(PortInUseError):
                await serve(InProcessSettings(port=squatter.getsockname()[1]), plan,
                            handle_signals=False)

    run(scenario)
    assert closed == ["closed"]


def test_stop_lets_in_flight_rpcs_finish_reports_not_serving_and_closes() -> None:
    servicer = SlowEnvHost(delay=0.5)
    closed: list[str] = []

    async def failing_close() -> None:
        raise RuntimeError("close failed")

    async def close() -> None:
        closed.append("closed")

    async def scenario() -> None:
        stop = asyncio.Event()
        port = _port_of_free_socket()
        plan = ServerPlan(services=[envhost_binding(servicer)], close_hooks=[failing_close, close])
        server_task = asyncio.create_task(serve(InProcessSettings(port=port, grace_seconds=5), plan,
                                                stop=stop, handle_signals=False))
        await _wait_until_serving(port)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=ENVHOST))
            assert (await watch.read()).status == SERVING
            in_flight = envhost_grpc.EnvHostServiceStub(channel).ListEnvironments(
                envhost_pb2.ListEnvironmentsRequest(), timeout=10)
            await asyncio.sleep(0.1)
            stop.set()
            assert (await watch.read()).status == NOT_SERVING
            watch.cancel()
            await in_flight
        started = time.monotonic()
        await asyncio.wait_for(server_task, timeout=10)
        assert time.monotonic() - started < 5

    run(scenario)
    assert servicer.finished == 1
    assert closed == ["closed"], "a failing close hook must not skip the next one"


def test_rpcs_running_past_the_grace_are_cancelled() -> None:
    async def scenario() -> None:
        stop = asyncio.Event()
        port = _port_of_free_socket()
        plan = ServerPlan(services=[envhost_binding(SlowEnvHost(delay=30))])
        server_task = asyncio.create_task(serve(InProcessSettings(port=port, grace_seconds=0.5),
                                                plan, stop=stop, handle_signals=False))
        await _wait_until_serving(port)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = envhost_grpc.EnvHostServiceStub(channel).ListEnvironments(
                envhost_pb2.ListEnvironmentsRequest(), timeout=20)
            await asyncio.sleep(0.1)
            started = time.monotonic()
            stop.set()
            with pytest.raises(grpc.aio.AioRpcError):
                await call
            await asyncio.wait_for(server_task, timeout=10)
            assert time.monotonic() - started < 3

    run(scenario)


def test_start_hook_decides_when_the_server_reports_serving() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def become_ready(health: HealthReporter) -> None:
            await release.wait()
            await health.set_serving()

        plan = ServerPlan(services=[envhost_binding(SlowEnvHost(0))], serving_at_start=False,
                          start_hooks=[become_ready])
        started = await start_server(InProcessSettings(), plan)
        address = f"127.0.0.1:{started.port}"
        try:
            assert await check(address) == NOT_SERVING
            assert await check(address, ENVHOST) == NOT_SERVING
            release.set()
            await asyncio.sleep(0.05)
            assert await check(address) == SERVING
            assert await check(address, ENVHOST) == SERVING
        finally:
            await stop_server(started, grace_seconds=1)
        assert all(task.done() for task in started.background)

    run(scenario)


def test_format_address_brackets_ipv6() -> None:
    assert format_address("127.0.0.1", 5) == "127.0.0.1:5"
    assert format_address("::1", 5) == "[::1]:5"
    assert format_address("[::1]", 5) == "[::1]:5"


async def _wait_until_serving(port: int) -> None:
    for _ in range(200):
        try:
            if await check(f"127.0.0.1:{port}") == SERVING:
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.02)
    raise AssertionError("server did not become SERVING")


def _port_of_free_socket() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _drain(call: grpc.aio.UnaryStreamCall) -> None:
    async for _ in call:
        pass


async def _one(message: object):  # noqa: ANN202 - an async request iterator
    yield message
