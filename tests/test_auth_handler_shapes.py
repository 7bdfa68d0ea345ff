"""The auth interceptor hands gRPC each handler in the shape it was written: a stream the handler
writes with context.write() stays a coroutine (no async generator between gRPC and it, whose
every resumption would pass through one: the EnvHost's Interact pays per step), an async
generator stays one, and either runs as the call's principal."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import grpc

from opentinker_runtime.auth.interceptor import LOCAL_PRINCIPAL, LocalPrincipalInterceptor, current_principal


def intercepted(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    async def continuation(_details: Any) -> grpc.RpcMethodHandler:
        return handler
    return asyncio.run(LocalPrincipalInterceptor().intercept_service(continuation, None))


def test_a_stream_written_with_context_write_stays_a_coroutine_and_sees_its_principal() -> None:
    seen = []

    async def interact(requests: Any, context: Any) -> None:
        seen.append(current_principal())
        await asyncio.sleep(0)

    wrapped = intercepted(grpc.stream_stream_rpc_method_handler(interact)).stream_stream
    assert inspect.iscoroutinefunction(wrapped) and not inspect.isasyncgenfunction(wrapped)
    assert asyncio.run(wrapped(iter(()), None)) is None
    assert seen == [LOCAL_PRINCIPAL] and current_principal() != LOCAL_PRINCIPAL  # bound for the call only


def test_an_async_generator_stream_stays_one_and_yields_as_its_principal() -> None:
    async def watch(request: Any, context: Any) -> Any:
        for index in range(3):
            yield (index, current_principal())

    wrapped = intercepted(grpc.unary_stream_rpc_method_handler(watch)).unary_stream
    assert inspect.isasyncgenfunction(wrapped)

    async def collect() -> list[Any]:
        return [item async for item in wrapped(None, None)]
    assert asyncio.run(collect()) == [(0, LOCAL_PRINCIPAL), (1, LOCAL_PRINCIPAL), (2, LOCAL_PRINCIPAL)]
