"""Every RPC a server handles, counted by service, method and status code, and timed.

`opentinker_grpc_requests_total{grpc_service, grpc_method, grpc_code}` counts finished calls;
`opentinker_grpc_request_seconds{grpc_service, grpc_method}` is the time from the handler's start
to its end (for a streaming response, until the last message). The code is what the client
sees: OK, the code a handler aborted with or set, UNKNOWN for an exception that escaped,
DEADLINE_EXCEEDED when the call ran out of time, CANCELLED when the client went away. The
interceptor is outermost, so calls refused by the API-key interceptor count too
(UNAUTHENTICATED, PERMISSION_DENIED).
Calls to methods the server does not have are not counted (their names are the caller's).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

import grpc

from opentinker_runtime.core import metrics

REQUESTS = metrics.counter("opentinker_grpc_requests", "gRPC calls handled, by service, method and "
                           "status code.", ("grpc_service", "grpc_method", "grpc_code"))
REQUEST_SECONDS = metrics.histogram("opentinker_grpc_request_seconds", "Time handling a gRPC call (a "
                                    "streaming response: until its last message).",
                                    ("grpc_service", "grpc_method"))


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self) -> None:
        self._recorders: dict[str, _Recorder] = {}
        """One per method served (only methods the server has reach it: a bounded set)."""

    async def intercept_service(self, continuation, handler_call_details):  # noqa: ANN001, ANN201
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        full_method = handler_call_details.method or ""
        recorder = self._recorders.get(full_method)
        if recorder is None:
            recorder = self._recorders[full_method] = _Recorder(*split_method(full_method))
        return _instrumented(handler, recorder)


def split_method(full_method: str) -> tuple[str, str]:
    """`/pkg.Service/Method` -> (`pkg.Service`, `Method`)."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method or "unknown"


class _Recorder:
    """Counts and times the calls of one method (its labelled series looked up once each)."""

    def __init__(self, service: str, method: str) -> None:
        self.service, self.method = service, method
        self._seconds = REQUEST_SECONDS.labels(grpc_service=service, grpc_method=method)
        self._counts: dict[grpc.StatusCode, Any] = {}

    def record(self, code: grpc.StatusCode, started: float) -> None:
        count = self._counts.get(code)
        if count is None:
            count = self._counts[code] = REQUESTS.labels(grpc_service=self.service, grpc_method=self.method,
                                                         grpc_code=code.name)
        count.inc()
        self._seconds.observe(time.perf_counter() - started)


def final_code(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    """The status the call ends with, given what the handler raised (None: it returned)."""
    if isinstance(error, asyncio.CancelledError):
        remaining = context.time_remaining()
        past_deadline = remaining is not None and remaining <= 0
        return grpc.StatusCode.DEADLINE_EXCEEDED if past_deadline else grpc.StatusCode.CANCELLED
    code = context.code()
    if isinstance(code, grpc.StatusCode) and code is not grpc.StatusCode.OK:
        return code  # aborted with it, or set with set_code()
    return grpc.StatusCode.OK if error is None else grpc.StatusCode.UNKNOWN


def _wrap_unary_response(behavior: Callable[..., Any], recorder: _Recorder) -> Callable[..., Any]:
    async def unary_response(request: Any, context: grpc.aio.ServicerContext) -> Any:
        started, error = time.perf_counter(), None
        try:
            return await behavior(request, context)
        except BaseException as raised:
            error = raised
            raise
        finally:
            recorder.record(final_code(context, error), started)
    return unary_response


def _wrap_stream_response(behavior: Callable[..., Any], recorder: _Recorder) -> Callable[..., Any]:
    if not inspect.isasyncgenfunction(behavior):  # writes with context.write(): a coroutine
        return _wrap_unary_response(behavior, recorder)

    async def stream_response(request: Any, context: grpc.aio.ServicerContext) -> Any:
        started, error = time.perf_counter(), None
        try:
            async for item in behavior(request, context):
                yield item
        except BaseException as raised:
            error = raised
            raise
        finally:
            recorder.record(final_code(context, error), started)
    return stream_response


def _instrumented(handler: grpc.RpcMethodHandler, recorder: _Recorder) -> grpc.RpcMethodHandler:
    serializers = {"request_deserializer": handler.request_deserializer,
                   "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(
            _wrap_unary_response(handler.unary_unary, recorder), **serializers)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(
            _wrap_stream_response(handler.unary_stream, recorder), **serializers)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(
            _wrap_unary_response(handler.stream_unary, recorder), **serializers)
    return grpc.stream_stream_rpc_method_handler(
        _wrap_stream_response(handler.stream_stream, recorder), **serializers)
