"""The one place that turns scheduler errors into gRPC statuses.

Domain errors map by class to a canonical code; the machine-readable reason travels in the
trailing metadata `opentinker-reason` as an `ErrorReason` value name (e.g.
`ERROR_REASON_REQUEST_ID_REUSED`), since google.rpc.ErrorInfo is not among our dependencies.
A Redis outage is UNAVAILABLE (retryable); so is a full Redis connection pool, whose message says
the scheduler is busy (RedisPoolExhausted), never that Redis is down. Nothing else is caught: a
bug stays an UNKNOWN error with grpc's own logging.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from opentinker_runtime.core.errors import REASON_METADATA_KEY
from opentinker_runtime.core.redis_store import REDIS_DOWN_ERRORS, RedisPoolExhausted
from opentinker_scheduler.errors import FailedPrecondition, InvalidArgument, NotFound, OutOfRange, PermissionDenied, QuotaExceeded, SchedulerError

CODES: tuple[tuple[type[SchedulerError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (QuotaExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (OutOfRange, grpc.StatusCode.OUT_OF_RANGE),
)
REDIS_DOWN_MESSAGE = "the scheduler's state store (Redis) is unavailable; retry later"

R = TypeVar("R")
Unary = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]
Streaming = Callable[[Any, Any, grpc.aio.ServicerContext], AsyncIterator[R]]


def status_code(error: SchedulerError) -> grpc.StatusCode:
    return next((code for cls, code in CODES if isinstance(error, cls)), grpc.StatusCode.INTERNAL)


async def abort(context: grpc.aio.ServicerContext, error: BaseException) -> None:
    """Abort the RPC with the status for `error` (raises)."""
    if isinstance(error, SchedulerError):
        metadata = ((REASON_METADATA_KEY, f"ERROR_REASON_{error.reason}"),) if error.reason != "UNSPECIFIED" else ()
        await context.abort(status_code(error), str(error), trailing_metadata=metadata)
    if isinstance(error, RedisPoolExhausted):
        await context.abort(grpc.StatusCode.UNAVAILABLE, busy_message(error))
    await context.abort(grpc.StatusCode.UNAVAILABLE, REDIS_DOWN_MESSAGE)


def busy_message(error: RedisPoolExhausted) -> str:
    return (f"the scheduler is busy: all {error.max_connections} of its connections to the state store "
            f"(Redis) stayed in use for {error.wait_seconds} s; Redis itself is fine, retry shortly")


def unary(method: Unary[R]) -> Unary[R]:
    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await method(self, request, context)
        except (SchedulerError, *REDIS_DOWN_ERRORS) as error:
            await abort(context, error)
            raise AssertionError("unreachable: abort raises") from error
    return wrapper


def streaming(method: Streaming[R]) -> Streaming[R]:
    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[R]:
        try:
            async for item in method(self, request, context):
                yield item
        except (SchedulerError, *REDIS_DOWN_ERRORS) as error:
            await abort(context, error)
    return wrapper
