"""`servicer_base`: the one base every servicer subclasses, and what runs around each RPC.

    class TrainerServicer(servicer_base(pb_grpc.TrainerServiceServicer, SERVICE)):
        @job_token(lease="lease", owner="session_id")
        async def OptimStep(self, request, context):
            return convert.optim_step_response(await self.trainer.optim_step(...))

Every RPC method a subclass defines is wrapped once, keeping its shape (a coroutine stays one,
an async generator stays one: gRPC runs either as written): the job-token declaration is
checked (`job_token`), then the method runs; a DomainError it raises (or that a check raises)
ends the call with its status (`status`), logged as `rpc_refused`. In a server stream, what was
yielded before the error reaches the caller first (items are passed on one by one, never
held), and the method's generator is closed on the way out, so its cleanup runs even when the
caller goes away. Nothing else is caught: a bug stays gRPC's UNKNOWN, with its traceback logged.

RPCs the subclass does not define answer UNIMPLEMENTED, naming the method. A service whose
domain lets other errors through that mean something to a caller says which (`Translation`:
the Scheduler's Redis outage is UNAVAILABLE).

A wrapper on the servicer, not a server interceptor: a binding served on any grpc.aio server
(tests serve bare ones) answers the same. Inside `start_server` it runs within the auth and
wire-guard interceptors: the caller's principal is known, undecodable requests never reach it,
and its status messages are clipped.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, ClassVar

import grpc
import structlog
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from opentinker_runtime.edge import status
from opentinker_runtime.edge.errors import DomainError, Unimplemented
from opentinker_runtime.edge.job_token import JobScope, check_scope, scope_of

log = structlog.get_logger(__name__)

LIVE_RPCS_HINT = "see README 'Live RPCs'"


@dataclass(frozen=True, kw_only=True)
class Translation:
    """Errors a service's domain lets through (not DomainErrors) and the DomainError each means."""

    errors: tuple[type[BaseException], ...]
    to_domain: Callable[[BaseException], DomainError]


NO_TRANSLATION = Translation(errors=(), to_domain=lambda error: DomainError(str(error)))


class EdgeServicer:
    """The behaviour `servicer_base` gives a generated servicer base (see the module doc)."""

    edge_service: ClassVar[ServiceDescriptor]
    edge_translation: ClassVar[Translation] = NO_TRANSLATION

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for method in cls.edge_service.methods:
            behavior = cls.__dict__.get(method.name)
            if behavior is not None and not getattr(behavior, "edge_wrapped", False):
                setattr(cls, method.name, rpc_handler(behavior, method, cls.edge_translation))

    def job_of_owner(self, value: str) -> str:
        """The job that owns the id an RPC's `owner=` field names (a servicer that declares one
        answers it)."""
        raise NotImplementedError(f"{type(self).__name__} declares owner= but has no job_of_owner")


def servicer_base(generated_base: type, service: ServiceDescriptor, *,
                  translation: Translation = NO_TRANSLATION) -> type:
    """The base of `service`'s servicer: `generated_base` (the *Servicer of its _pb2_grpc) with
    every RPC answering UNIMPLEMENTED until a subclass defines it."""
    unbuilt = {method.name: _unimplemented(method) for method in service.methods}
    return type(f"Edge{generated_base.__name__}", (EdgeServicer, generated_base),
                {"edge_service": service, "edge_translation": translation, **unbuilt})


def unimplemented_message(full_method: str) -> str:
    """The status message an unbuilt RPC answers with."""
    return f"{full_method} is not implemented yet; {LIVE_RPCS_HINT}"


def _unimplemented(method: MethodDescriptor) -> Callable[..., Any]:
    message = unimplemented_message(f"{method.containing_service.full_name}/{method.name}")

    async def rpc(self: object, request_or_iterator: object, context: grpc.aio.ServicerContext) -> None:
        raise Unimplemented(message)

    rpc.__name__ = method.name
    return rpc


def rpc_handler(behavior: Callable[..., Any], method: MethodDescriptor,
                translation: Translation) -> Callable[..., Any]:
    """`behavior` wrapped as the module doc says, in its own shape."""
    wrap = _streaming if inspect.isasyncgenfunction(behavior) else _coroutine
    handler = wrap(behavior, Call(method=method, scope=scope_of(behavior), translation=translation))
    handler.edge_wrapped = True  # type: ignore[attr-defined]
    return functools.wraps(behavior)(handler)


@dataclass(frozen=True, kw_only=True)
class Call:
    """What the wrapper knows of one RPC."""

    method: MethodDescriptor
    scope: JobScope | None
    translation: Translation

    @property
    def full_name(self) -> str:
        return f"{self.method.containing_service.full_name}/{self.method.name}"

    async def admitted(self, servicer: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The request (a client stream re-fed from its first message) once the job-token check
        passed."""
        if self.scope is None:
            return request
        if not self.method.client_streaming:
            await check_scope(self.scope, request, servicer, context)
            return request
        requests = aiter(request)
        first = await anext(requests, None)
        if first is not None:
            await check_scope(self.scope, first, servicer, context)
        return _prepended(first, requests)

    async def refuse(self, context: grpc.aio.ServicerContext, error: BaseException) -> None:
        domain = error if isinstance(error, DomainError) else self.translation.to_domain(error)
        log.info("rpc_refused", method=self.full_name, code=str(domain.code), reason=domain.reason,
                 error=domain.message)
        await status.abort(context, domain)


def _coroutine(behavior: Callable[..., Any], call: Call) -> Callable[..., Any]:
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await behavior(self, await call.admitted(self, request, context), context)
        except (DomainError, *call.translation.errors) as error:
            await call.refuse(context, error)
    return handler


def _streaming(behavior: Callable[..., Any], call: Call) -> Callable[..., Any]:
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            request = await call.admitted(self, request, context)
            async with aclosing(behavior(self, request, context)) as items:
                async for item in items:
                    yield item
        except (DomainError, *call.translation.errors) as error:
            await call.refuse(context, error)
    return handler


async def _prepended(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    if first is None:
        return
    yield first
    async for item in rest:
        yield item
