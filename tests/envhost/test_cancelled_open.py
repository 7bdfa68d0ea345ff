"""An OpenSession given up mid-way (the caller's deadline or cancellation while the game's
process is forked or its constructor runs, or just as the answer is on its way) leaves no
session and no game process behind for long: a session nobody used since it was opened is
closed after the unclaimed TTL, one in use is not."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import psutil
import pytest

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import ServerPlan, ServiceBinding, start_server, stop_server
from opentinker_envhost.catalog import GameCatalog, GameSpec
from opentinker_envhost.servicer import SERVICE_FULL_NAME, EnvHostServicer
from opentinker_envhost.sessions import SessionLimits, SessionManager
from opentinker_envhost.settings import EnvHostSettings
from tests.envhost.games import Echo, catalog_with_test_games

UNCLAIMED_TTL_S = 0.5


class SlowToBuild(Echo):
    """A constructor that takes `seconds`."""

    def __init__(self, seconds: float = 1.0) -> None:
        time.sleep(seconds)
        super().__init__(turns=100)


class AnswerLostServicer(EnvHostServicer):
    """Opens the session, then its answer takes longer than the caller waits (a slow network,
    a busy event loop): the session exists, its opener never learns its id."""

    async def OpenSession(self, request: pb.OpenSessionRequest, context: Any) -> pb.OpenSessionResponse:
        response = await super().OpenSession(request, context)
        await asyncio.sleep(1.0)
        return response


def catalog() -> GameCatalog:
    slow = GameSpec.of("slow", SlowToBuild, f"{__name__}:SlowToBuild")
    return GameCatalog([*catalog_with_test_games().specs.values(), slow])


@asynccontextmanager
async def envhost(servicer: type[EnvHostServicer] = EnvHostServicer,
                  **limits: Any) -> AsyncIterator[tuple[pb_grpc.EnvHostServiceStub, SessionManager]]:
    manager = SessionManager(catalog(), SessionLimits(unclaimed_ttl_s=UNCLAIMED_TTL_S, **limits))
    binding = ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=servicer(manager),
                             add_to_server=pb_grpc.add_EnvHostServiceServicer_to_server)
    started = await start_server(EnvHostSettings(port=0, auth="disabled"),
                                 ServerPlan(services=[binding], close_hooks=[manager.close_all]))
    await manager.start()  # the fork server (process isolation), as the EnvHost's start hook does
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{started.port}") as channel:
            yield pb_grpc.EnvHostServiceStub(channel), manager
    finally:
        await stop_server(started, grace_seconds=1)
        await manager.close_all()


def game_processes() -> int:
    """Processes of this test's games (the fork server's children)."""
    return sum(len(child.children()) for child in psutil.Process().children())


async def reaped_after_unclaimed_ttl(manager: SessionManager) -> None:
    await asyncio.sleep(UNCLAIMED_TTL_S + 0.1)
    await manager.reap_idle()


async def open_and_cancel(stub: pb_grpc.EnvHostServiceStub, env_name: str, cancel_within_s: float) -> str:
    """Open a session and cancel the call at a random moment; its id if the answer came first."""
    call = stub.OpenSession(pb.OpenSessionRequest(env_name=env_name))
    asyncio.get_running_loop().call_later(random.uniform(0, cancel_within_s), call.cancel)
    try:
        return (await call).session_id
    except (asyncio.CancelledError, grpc.aio.AioRpcError):
        return ""


def test_an_open_whose_answer_never_arrives_leaves_nothing_after_the_unclaimed_ttl() -> None:
    async def scenario() -> None:
        async with envhost(AnswerLostServicer) as (stub, manager):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.OpenSession(pb.OpenSessionRequest(env_name="echo"), timeout=0.3)
            assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert len(manager.sessions) == 1 and game_processes() == 1  # opened, id never delivered
            await reaped_after_unclaimed_ttl(manager)
            assert manager.sessions == {} and game_processes() == 0
    asyncio.run(scenario())


@pytest.mark.parametrize("isolation,opens,cancel_within_s", [("thread", 120, 0.003), ("process", 30, 0.03)])
def test_opens_cancelled_at_random_moments_leave_only_the_sessions_their_callers_got(
        isolation: str, opens: int, cancel_within_s: float) -> None:
    async def scenario() -> None:
        async with envhost(isolation=isolation) as (stub, manager):
            received = [sid for _ in range(opens) if (sid := await open_and_cancel(stub, "echo", cancel_within_s))]
            for session_id in received:  # their callers use them: they stay
                await stub.Reset(pb.ResetRequest(session_id=session_id))
            await reaped_after_unclaimed_ttl(manager)
            assert set(manager.sessions) == set(received)
            if isolation == "process":
                assert game_processes() == len(received)
    asyncio.run(scenario())


def test_an_open_cancelled_while_the_game_is_built_leaves_no_session_nor_process() -> None:
    async def scenario() -> None:
        async with envhost() as (stub, manager):
            config = pb.OpenSessionRequest(env_name="slow")
            config.config.update({"seconds": 0.6})
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.OpenSession(config, timeout=0.2)
            assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            await asyncio.sleep(0.8)  # the constructor would have finished by now
            assert manager.sessions == {} and manager.opening == 0 and game_processes() == 0
    asyncio.run(scenario())


def test_a_session_in_use_outlives_the_unclaimed_ttl() -> None:
    async def scenario() -> None:
        async with envhost(isolation="thread") as (stub, manager):
            opened = await stub.OpenSession(pb.OpenSessionRequest(env_name="echo"))
            await stub.Reset(pb.ResetRequest(session_id=opened.session_id))
            await reaped_after_unclaimed_ttl(manager)
            await stub.Step(pb.StepRequest(session_id=opened.session_id, action="hello"))
    asyncio.run(scenario())
