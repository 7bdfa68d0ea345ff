"""What reaches a handler decodes, and what leaves it fits: every server's innermost interceptor.

Requests that do not decode are INVALID_ARGUMENT, not UNKNOWN. grpc runs a method's request
deserializer before the handler; bytes that are not an encoding of the request type (garbage, a
truncated message, an invalid wire type, nesting past protobuf's depth limit) make it raise, and
grpc answers UNKNOWN "Unexpected <class 'DecodeError'>" as if the service had crashed. Here each
method's deserializer is wrapped so that a failure yields an `UndecodableRequest`, and the
handler then aborts with INVALID_ARGUMENT "request: not a valid <type> (...)" instead of
running; a client stream fails at the first message that does not decode.

Status messages fit in gRPC's metadata limit. A message travels percent-encoded in the
`grpc-message` trailer, and a client refuses trailers past 16 KiB (8 KiB soft) with
RESOURCE_EXHAUSTED "received metadata size exceeds hard limit", losing the real code: a
NOT_FOUND that echoes a 1 MiB session id arrived as RESOURCE_EXHAUSTED. The handler's context
cuts a longer message in the middle to MAX_STATUS_BYTES of UTF-8.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

MAX_DECODE_PROBLEM = 200
MAX_STATUS_BYTES = 2048
"""Worst case 3 encoded characters per byte: 6 KiB of grpc-message, under the 8 KiB soft limit."""


def clip_status_message(message: str, limit: int = MAX_STATUS_BYTES) -> str:
    """`message`, or its head and tail around a marker when its UTF-8 is longer than `limit`."""
    encoded = message.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return message
    marker = f" ... ({len(encoded) - limit} bytes cut) ... "
    keep = (limit - len(marker)) // 2
    return (encoded[:keep].decode("utf-8", "ignore") + marker + encoded[-keep:].decode("utf-8", "ignore"))


class _ClippingContext:
    """The handler's ServicerContext, with status messages clipped to MAX_STATUS_BYTES."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        await self._context.abort(code, clip_status_message(details), trailing_metadata)

    def set_details(self, details: str) -> None:
        self._context.set_details(clip_status_message(details))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class UndecodableRequest:
    """What the wrapped deserializer returns for bytes that do not decode."""

    def __init__(self, problem: str) -> None:
        self.problem = problem


class UndecodableRequestError(Exception):
    """Raised by a client stream at a message that does not decode. The handler may read its
    requests in another task (EnvHost's Interact does), so the stream raises instead of
    aborting, and the handler's wrapper aborts when the error reaches it."""

    def __init__(self, request: UndecodableRequest) -> None:
        super().__init__(request.problem)
        self.request = request


def tolerant(deserialize: Callable[[bytes], Any], type_name: str) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as error:  # noqa: BLE001 - any failure to decode is the caller's bad input
            return UndecodableRequest(f"request: not a valid {type_name} ({str(error)[:MAX_DECODE_PROBLEM]})")
    return decode


async def refuse(context: grpc.aio.ServicerContext, request: UndecodableRequest) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.problem)


def _unary_request(behavior: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behavior):
        async def stream_response(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if isinstance(request, UndecodableRequest):
                await refuse(context, request)
            async for item in behavior(request, _ClippingContext(context)):
                yield item
        return stream_response

    async def unary_response(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, UndecodableRequest):
            await refuse(context, request)
        return await behavior(request, _ClippingContext(context))
    return unary_response


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, UndecodableRequest):
            raise UndecodableRequestError(request)
        yield request


def _stream_request(behavior: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behavior):
        async def stream_response(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                async for item in behavior(_checked(requests), _ClippingContext(context)):
                    yield item
            except UndecodableRequestError as error:
                await refuse(context, error.request)
        return stream_response

    async def unary_response(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await behavior(_checked(requests), _ClippingContext(context))
        except UndecodableRequestError as error:
            await refuse(context, error.request)
    return unary_response


def _type_name(deserialize: Callable[[bytes], Any]) -> str:
    owner = getattr(deserialize, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", "request message")


class WireGuardInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, handler_call_details):  # noqa: ANN001, ANN201
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        serializers = {"request_deserializer": tolerant(handler.request_deserializer,
                                                        _type_name(handler.request_deserializer)),
                       "response_serializer": handler.response_serializer}
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(_unary_request(handler.unary_unary), **serializers)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(_unary_request(handler.unary_stream), **serializers)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(_stream_request(handler.stream_unary), **serializers)
        return grpc.stream_stream_rpc_method_handler(_stream_request(handler.stream_stream), **serializers)
