"""The baseline of bench/envhost.py: a bare grpc.aio server with the EnvHost's Interact stream.

    python bench/_echo_server.py --port PORT

It implements `opentinker.envhost.v1.EnvHostService/Interact` itself (the generated servicer
base), so the bench's client code is the same for both servers: every InteractRequest is
answered at once, inline in the stream handler, with an InteractResponse of the same kind and
sequence and about the same size as the EnvHost's (the step answer carries the trivial game's
observation and reward and an empty `info` Struct). No sessions, locks, tasks, threads, game
calls or Struct conversions; the only state is a step counter per stream, so CloseSession can
answer the steps served like the EnvHost does (the bench opens one session per stream).

Server set-up as the EnvHost's `start_server`: the same options (opentinker_runtime.core.server
SERVER_OPTIONS; the EnvHost adds none), no interceptors (the EnvHost runs with
OPENTINKER_AUTH=disabled), grpc.health.v1 (the bench waits for SERVING). Not registered:
reflection (never called). Runs until SIGTERM/SIGINT, or until its parent dies (Linux).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import AsyncIterable, AsyncIterator

import grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from _envhost_games import INITIAL_USER_MESSAGE, OBSERVATION, RESET_OBSERVATION, REWARD, SYSTEM_PROMPT
from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import SERVER_OPTIONS

SERVICE_FULL_NAME = pb.DESCRIPTOR.services_by_name["EnvHostService"].full_name


class EchoEnvHost(pb_grpc.EnvHostServiceServicer):
    """Interact only; the other RPCs stay UNIMPLEMENTED (the generated defaults)."""

    async def Interact(self, request_iterator: AsyncIterable[pb.InteractRequest],
                       context: grpc.aio.ServicerContext) -> AsyncIterator[pb.InteractResponse]:
        steps = 0
        async for request in request_iterator:
            kind = request.WhichOneof("action")
            if kind == "step":
                steps += 1
                yield pb.InteractResponse(sequence=request.sequence, step=pb.StepResponse(
                    observation=OBSERVATION, reward=REWARD, done=False, info=struct_pb2.Struct()))
            elif kind == "open_session":
                yield pb.InteractResponse(sequence=request.sequence, open_session=pb.OpenSessionResponse(
                    session_id=f"echo-{id(request_iterator):x}",
                    environment=pb.Environment(name=request.open_session.env_name)))
            elif kind == "reset":
                yield pb.InteractResponse(sequence=request.sequence, reset=pb.ResetResponse(
                    system_prompt=SYSTEM_PROMPT, initial_user_message=INITIAL_USER_MESSAGE,
                    observation=RESET_OBSERVATION, info=struct_pb2.Struct()))
            elif kind == "close_session":
                yield pb.InteractResponse(sequence=request.sequence,
                                          close_session=pb.CloseSessionResponse(steps=steps))
            else:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "action: set one")


async def serve(port: int) -> None:
    server = grpc.aio.server(options=list(SERVER_OPTIONS))
    pb_grpc.add_EnvHostServiceServicer_to_server(EchoEnvHost(), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise SystemExit(f"echo server: cannot bind 127.0.0.1:{port}")
    for name in ("", SERVICE_FULL_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(serve(parser.parse_args().port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
