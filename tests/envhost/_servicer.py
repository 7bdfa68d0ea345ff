"""The EnvHost servicer's test kit (test_servicer.py, test_step_fast_path.py,
test_close_with_stream.py): a servicer with its session manager on a real port, a scenario run
against its stub, request builders and the error a call raised."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_envhost.servicer import envhost_service_binding
from opentinker_envhost.sessions import SessionLimits, SessionManager
from opentinker_envhost.settings import EnvHostSettings
from tests.envhost.games import catalog_with_test_games

Stub = pb_grpc.EnvHostServiceStub
Code = grpc.StatusCode


@asynccontextmanager
async def envhost_and_manager(**limits: Any) -> AsyncIterator[tuple[Stub, SessionManager]]:
    """An EnvHost with the test games on a free port, a stub connected to it and its sessions."""
    manager = SessionManager(catalog_with_test_games(), SessionLimits(**limits))
    plan = ServerPlan(services=[envhost_service_binding(manager)], close_hooks=[manager.close_all])
    started = await start_server(EnvHostSettings(port=0, auth="disabled"), plan)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{started.port}") as channel:
            yield pb_grpc.EnvHostServiceStub(channel), manager
    finally:
        await stop_server(started, grace_seconds=1)
        await manager.close_all()


@asynccontextmanager
async def envhost(**limits: Any) -> AsyncIterator[Stub]:
    """An EnvHost with the test games on a free port, and a stub connected to it."""
    async with envhost_and_manager(**limits) as (stub, _):
        yield stub


def run(scenario: Callable[[Stub], Awaitable[None]], **limits: Any) -> None:
    async def main() -> None:
        async with envhost(**limits) as stub:
            await scenario(stub)
    asyncio.run(main())


def struct(**values: Any) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message


async def rpc_error(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


class Requests:
    """A client-side request stream the test feeds one message at a time."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[pb.InteractRequest | None] = asyncio.Queue()
        self.sequence = 0

    def send(self, **action: Any) -> int:
        self.sequence += 1
        self.queue.put_nowait(pb.InteractRequest(sequence=self.sequence, **action))
        return self.sequence

    def end(self) -> None:
        self.queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[pb.InteractRequest]:
        while (request := await self.queue.get()) is not None:
            yield request
