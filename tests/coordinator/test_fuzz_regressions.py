"""Regressions found by fuzzing the live Coordinator (tests/chaos/test_fuzz_rpcs.py): an OpenMatch
whose environment the EnvHost refuses (unknown env_name, bad reset kwargs) or whose named EnvHost
address is malformed or silent was UNAVAILABLE, as if the environment had broken; it is now
INVALID_ARGUMENT naming the field (FAILED_PRECONDITION for a named address nobody answers at).
A real CoordinatorServicer and the real EnvHost client (`envhost_seats`) call a small EnvHost
servicer on a real port that answers like the EnvHost does."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
from google.protobuf import json_format

from opentinker_api.common.v1 import environment_pb2
from opentinker_api.coordinator.v1 import coordinator_service_pb2 as pb
from opentinker_api.coordinator.v1 import coordinator_service_pb2_grpc as pb_grpc
from opentinker_api.envhost.v1 import envhost_service_pb2 as env_pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as env_grpc
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.protocol.envhost_seats import EnvHostChannels
from opentinker_coordinator.runs import RunRegistry, RunState
from opentinker_coordinator.servicer import coordinator_service_binding
from harness.stack import free_ports
from tests.coordinator._protocol import refused

Code = grpc.StatusCode


class TwoSeatEnvHost(env_grpc.EnvHostServiceServicer):
    """Knows one game, "duel" (seats a, b); refuses other names and reset kwargs as the EnvHost does,
    and has no session left for job "crowded"."""

    async def OpenSession(self, request, context):  # noqa: ANN001, ANN201
        if request.job_id == "crowded":
            await context.abort(Code.RESOURCE_EXHAUSTED, "256 sessions are open (max_sessions); close some")
        if request.env_name != "duel":
            await context.abort(Code.NOT_FOUND, f"env_name: no environment named {request.env_name!r}; known: duel")
        duel = env_pb.Environment(name="duel", seats=["a", "b"])
        return env_pb.OpenSessionResponse(session_id="s1", environment=duel)

    async def Reset(self, request, context):  # noqa: ANN001, ANN201
        if json_format.MessageToDict(request.kwargs):
            await context.abort(Code.INVALID_ARGUMENT, "kwargs: Duel.reset() does not accept these arguments")
        return env_pb.ResetResponse(system_prompt="Duel.", initial_user_message="Go.")

    async def CloseSession(self, request, context):  # noqa: ANN001, ANN201
        return env_pb.CloseSessionResponse()


@asynccontextmanager
async def coordinator_over_an_envhost() -> AsyncIterator[pb_grpc.CoordinatorServiceStub]:
    envhost = grpc.aio.server()
    env_grpc.add_EnvHostServiceServicer_to_server(TwoSeatEnvHost(), envhost)
    envhost_port = envhost.add_insecure_port("127.0.0.1:0")
    channels = EnvHostChannels(f"127.0.0.1:{envhost_port}")
    protocol = AgentProtocol(channels.factory())

    async def launcher(run: RunState) -> None:
        await run.stop.wait()

    registry = RunRegistry(launcher)
    binding = coordinator_service_binding(registry, protocol)
    server = grpc.aio.server()
    binding.add_to_server(binding.servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await envhost.start()
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.CoordinatorServiceStub(channel)
    finally:
        await server.stop(0)
        await protocol.close()
        await registry.close()
        await channels.close()
        await envhost.stop(0)


def open_match(env_name: str = "duel", address: str = "", **reset_kwargs: object) -> pb.OpenMatchRequest:
    request = pb.OpenMatchRequest(job_id="job", environment=environment_pb2.EnvironmentReference(
        env_name=env_name, envhost_address=address))
    request.reset_kwargs.update(reset_kwargs)
    return request


def test_an_open_match_the_envhost_refuses_names_the_openmatch_field() -> None:
    async def scenario() -> None:
        async with coordinator_over_an_envhost() as stub:
            assert (await stub.OpenMatch(open_match())).match.seats == ["a", "b"]
            await refused(stub.OpenMatch(open_match("chess")), Code.INVALID_ARGUMENT, "INVALID_FIELD",
                          "environment.env_name: no environment named 'chess'")
            await refused(stub.OpenMatch(open_match(size=-1)), Code.INVALID_ARGUMENT, "INVALID_FIELD",
                          "reset_kwargs: Duel.reset() does not accept these arguments")
            crowded = open_match()
            crowded.job_id = "crowded"
            await refused(stub.OpenMatch(crowded), Code.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED",
                          "environment: 256 sessions are open")
    asyncio.run(scenario())


def test_nan_in_reset_kwargs_or_config_is_invalid_not_a_json_error() -> None:
    async def scenario() -> None:
        async with coordinator_over_an_envhost() as stub:
            await refused(stub.OpenMatch(open_match(size=math.nan)), Code.INVALID_ARGUMENT, "INVALID_FIELD",
                          "reset_kwargs: numbers must be finite")
            request = open_match()
            request.environment.config.update({"deep": [{"x": math.inf}]})
            await refused(stub.OpenMatch(request), Code.INVALID_ARGUMENT, "INVALID_FIELD",
                          "environment.config: numbers must be finite")
    asyncio.run(scenario())


def test_a_named_envhost_address_must_be_host_port_and_answer() -> None:
    silent = f"127.0.0.1:{free_ports(1)[0]}"

    async def scenario() -> None:
        async with coordinator_over_an_envhost() as stub:
            for malformed in ("not an address", "\n", "host-without-port", "é:1"):
                await refused(stub.OpenMatch(open_match(address=malformed)), Code.INVALID_ARGUMENT, "INVALID_FIELD",
                              "environment.envhost_address: must be host:port")
            await refused(stub.OpenMatch(open_match(address=silent)), Code.FAILED_PRECONDITION,
                          "ENVIRONMENT_FAILED", f"environment.envhost_address: no EnvHost answers at {silent!r}")
    asyncio.run(scenario())
