"""The Rollout's channel to an EnvHost redials promptly once the EnvHost is back on its port.

gRPC's default reconnect backoff grows towards 120 s: after a 10 s outage the channel's next try
was seconds away, and every episode started in that window failed as UNAVAILABLE (an evaluation
reported 64 of 64 environment errors and reward 0). The EnvHost here is a stand-in gRPC server
(the health service) stopped and started again on the same port; the channel is the Rollout's.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from opentinker_rollout.envhost_client import EnvHostChannels
from harness.stack import free_ports

OUTAGE_S = 5.0  # gRPC's default backoff would next try ~4 s after the return
REACHABLE_WITHIN_S = 1.0


async def serve(port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


async def answers(channel: grpc.aio.Channel) -> bool:
    try:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=0.2)
    except grpc.aio.AioRpcError as error:
        assert error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), error
        return False
    return True


async def seconds_to_reach_a_returned_envhost(channel_for) -> float:  # noqa: ANN001
    (port,) = free_ports(1)
    server = await serve(port)
    channels = EnvHostChannels()
    try:
        channel = channel_for(channels, f"127.0.0.1:{port}")
        assert await answers(channel)
        await server.stop(None)
        gone = time.monotonic()
        while time.monotonic() - gone < OUTAGE_S:  # episodes keep trying through the outage
            assert not await answers(channel)
            await asyncio.sleep(0.1)
        server = await serve(port)
        back = time.monotonic()
        while not await answers(channel):
            await asyncio.sleep(0.05)
            if time.monotonic() - back > 30:
                break
        return time.monotonic() - back
    finally:
        await channels.close()
        await server.stop(None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["channel", "job_channel"])  # an admin's calls, a job's calls
def test_an_envhost_back_on_its_port_after_an_outage_is_reachable_within_a_second(kind: str) -> None:
    waited = asyncio.run(seconds_to_reach_a_returned_envhost(
        lambda channels, address: getattr(channels, kind)(address)))
    assert waited < REACHABLE_WITHIN_S, f"the Rollout's channel reached the returned EnvHost after {waited:.1f} s"
