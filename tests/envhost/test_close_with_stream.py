"""A session opened on an Interact stream with close_with_stream ends with its stream."""

from __future__ import annotations

import asyncio

import grpc

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from tests.envhost._servicer import Code, Requests, Stub, rpc_error, run


async def _open_on_stream(stub: Stub, close_with_stream: bool) -> tuple[grpc.aio.StreamStreamCall, str, Requests]:
    requests = Requests()
    call = stub.Interact(requests.__aiter__())
    requests.send(open_session=pb.OpenSessionRequest(env_name="echo", close_with_stream=close_with_stream))
    opened = await call.read()
    requests.send(reset=pb.ResetRequest(session_id=opened.open_session.session_id))
    assert (await call.read()).WhichOneof("result") == "reset"
    return call, opened.open_session.session_id, requests


async def _still_open(stub: Stub, session_id: str) -> bool:
    try:
        await stub.Step(pb.StepRequest(session_id=session_id, action="hi"))
    except grpc.aio.AioRpcError as error:
        assert error.code() == Code.NOT_FOUND, error
        return False
    return True


async def _eventually_closed(stub: Stub, session_id: str) -> None:
    for _ in range(100):
        if not await _still_open(stub, session_id):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"session {session_id} is still open")


def test_a_cancelled_stream_closes_the_sessions_it_opened_with_close_with_stream() -> None:
    async def scenario(stub: Stub) -> None:
        bound, bound_id, _ = await _open_on_stream(stub, close_with_stream=True)
        loose, loose_id, _ = await _open_on_stream(stub, close_with_stream=False)
        bound.cancel()
        loose.cancel()
        await _eventually_closed(stub, bound_id)
        assert await _still_open(stub, loose_id)  # without the flag a session outlives its stream
        await stub.CloseSession(pb.CloseSessionRequest(session_id=loose_id))
    run(scenario)


def test_a_stream_that_ends_normally_closes_its_bound_sessions_and_a_closed_one_is_no_error() -> None:
    async def scenario(stub: Stub) -> None:
        call, first, requests = await _open_on_stream(stub, close_with_stream=True)
        requests.send(open_session=pb.OpenSessionRequest(env_name="echo", close_with_stream=True))
        second = (await call.read()).open_session.session_id
        requests.send(close_session=pb.CloseSessionRequest(session_id=first))
        assert (await call.read()).WhichOneof("result") == "close_session"
        requests.end()
        assert await call.read() == grpc.aio.EOF
        await _eventually_closed(stub, second)
        error = await rpc_error(stub.Step(pb.StepRequest(session_id=first, action="hi")))
        assert error.code() == Code.NOT_FOUND
    run(scenario)


def test_the_unary_open_ignores_the_flag() -> None:
    async def scenario(stub: Stub) -> None:
        opened = await stub.OpenSession(pb.OpenSessionRequest(env_name="echo", close_with_stream=True))
        await stub.Reset(pb.ResetRequest(session_id=opened.session_id))
        await asyncio.sleep(0.2)
        assert await _still_open(stub, opened.session_id)
    run(scenario)
