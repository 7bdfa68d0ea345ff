"""Regressions found by fuzzing the live services (tests/chaos/test_fuzz_rpcs.py), fixed once for
every server in `opentinker_runtime.core.wire_guard`: bytes that do not decode as the request were
UNKNOWN ("Unexpected <class 'DecodeError'>"), and a status message echoing a 1 MiB id broke the
client's 16 KiB trailer limit (RESOURCE_EXHAUSTED instead of the real code). A server built by
`core.server.start_server` on a real port, with a servicer that behaves like ours."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import ClassVar

import grpc
import pytest

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import ServerPlan, ServiceBinding, start_server, stop_server
from opentinker_runtime.core.settings import ServiceSettings, port_setting
from opentinker_runtime.core.wire_guard import MAX_STATUS_BYTES, clip_status_message

HUGE_ID = "x" * (1 << 20)
INTERACT = "/opentinker.envhost.v1.EnvHostService/Interact"
STEP = "/opentinker.envhost.v1.EnvHostService/Step"


class EchoingEnvHost(pb_grpc.EnvHostServiceServicer):
    """Echoes ids in its errors, and reads Interact requests in another task (as the EnvHost does)."""

    async def Step(self, request, context):  # noqa: ANN001, ANN201
        await context.abort(grpc.StatusCode.NOT_FOUND, f"session_id: no open session {request.session_id!r}")

    async def CloseSession(self, request, context):  # noqa: ANN001, ANN201
        context.set_code(grpc.StatusCode.NOT_FOUND)
        context.set_details(f"session_id: no open session {request.session_id!r}")
        return pb.CloseSessionResponse()

    async def Interact(self, request_iterator, context):  # noqa: ANN001, ANN201
        queue: asyncio.Queue = asyncio.Queue()

        async def read() -> None:
            try:
                async for request in request_iterator:
                    await queue.put(pb.InteractResponse(sequence=request.sequence))
            finally:
                await queue.put(None)
        reader = asyncio.create_task(read())
        while (response := await queue.get()) is not None:
            yield response
        await reader


@dataclass(frozen=True, kw_only=True)
class EchoSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TESTECHO_"
    port: int = port_setting(0)


async def with_server(scenario):  # noqa: ANN001, ANN201
    binding = ServiceBinding(full_name="opentinker.envhost.v1.EnvHostService", servicer=EchoingEnvHost(),
                             add_to_server=pb_grpc.add_EnvHostServiceServicer_to_server)
    started = await start_server(EchoSettings(auth="disabled"), ServerPlan(services=[binding]))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{started.port}") as channel:
            return await scenario(channel)
    finally:
        await stop_server(started, grace_seconds=0.5)


async def failure(call) -> grpc.aio.AioRpcError:  # noqa: ANN001 - a unary or a streaming call
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("the call succeeded")


def test_garbage_bytes_are_invalid_argument_for_unary_and_client_streams_read_in_another_task() -> None:
    async def scenario(channel: grpc.aio.Channel) -> list[grpc.aio.AioRpcError]:
        step = channel.unary_unary(STEP)
        interact = channel.stream_stream(INTERACT)
        valid = pb.InteractRequest(sequence=1).SerializeToString()
        return [await failure(step(b"\xff\xff\xff", timeout=10)),
                await failure(interact(iter([valid, b"\x0a\x05ab"]), timeout=10))]

    for error in asyncio.run(with_server(scenario)):
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert error.details().startswith("request: not a valid opentinker.envhost.v1.")


def test_a_status_message_echoing_a_huge_id_is_clipped_and_keeps_its_code() -> None:
    async def scenario(channel: grpc.aio.Channel) -> list[grpc.aio.AioRpcError]:
        stub = pb_grpc.EnvHostServiceStub(channel)
        return [await failure(stub.Step(pb.StepRequest(session_id=HUGE_ID), timeout=10)),
                await failure(stub.CloseSession(pb.CloseSessionRequest(session_id=HUGE_ID), timeout=10))]

    for error in asyncio.run(with_server(scenario)):
        assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
        assert error.details().startswith("session_id: no open session 'xxx")
        assert "bytes cut" in error.details() and len(error.details().encode()) <= MAX_STATUS_BYTES


def test_clipping_keeps_short_messages_and_whole_characters() -> None:
    assert clip_status_message("job_id: must be set") == "job_id: must be set"
    clipped = clip_status_message("é" * 5000)
    assert len(clipped.encode()) <= MAX_STATUS_BYTES and clipped.startswith("éé") and clipped.endswith("éé")


@pytest.mark.timeout(10)
def test_masking_url_credentials_in_a_megabyte_of_letters_is_linear() -> None:
    """The redaction regex rescanned a run of letters from each letter (a 1 MiB id logged froze a
    service for hours); it must stay linear and still mask every URL's userinfo."""
    from opentinker_runtime.core.redaction import mask_url_credentials

    assert mask_url_credentials("x" * (1 << 20)) == "x" * (1 << 20)
    assert mask_url_credentials("redis://user:secret@host:6379/0") == "redis://***@host:6379/0"
    assert mask_url_credentials("see 1redis://u:p@h") == "see 1redis://***@h"
