"""API-key authentication for every OpenTinker gRPC server, and the key on outgoing channels.

Server side: `AuthInterceptor` reads `authorization: Bearer <key>` on every call (health checks
and reflection stay open), verifies the key (`opentinker.core.auth`), and runs the handler with
the caller's `Principal` in `current_principal()`. Missing, malformed, unknown or revoked keys get
UNAUTHENTICATED; a service for OpenTinker's own processes (`admin_only`) answers a tenant key
with PERMISSION_DENIED. Keys never reach logs: only their public id does. The interceptor also
makes its `JobTokenVerifier` the handler's `current_job_tokens()`, which job-scoped handlers use
through `opentinker.core.job_token_guard` (None when auth is off: no job token is checked).

Client side: `authenticated_channel(address, api_key, job_token=...)` is an aio channel that adds
the key (and a job's token, `x-opentinker-job-token`) to every call.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
import structlog

from opentinker.core.auth import Principal, bearer_token
from opentinker.core.job_tokens import JOB_TOKEN_METADATA_KEY, JobTokenVerifier
from opentinker.core.redis_store import REDIS_DOWN_ERRORS

log = structlog.get_logger(__name__)

OPEN_SERVICES = frozenset({"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                           "grpc.reflection.v1.ServerReflection"})
LOCAL_PRINCIPAL = Principal(tenant_id="default", admin=True, key_id="")
"""Who every caller is when auth is disabled (OPENTINKER_AUTH=disabled, local use only)."""
_PRINCIPAL: contextvars.ContextVar[Principal] = contextvars.ContextVar("opentinker_principal",
                                                                       default=LOCAL_PRINCIPAL)
_JOB_TOKENS: contextvars.ContextVar[JobTokenVerifier | None] = contextvars.ContextVar("opentinker_job_tokens",
                                                                                 default=None)
Verify = Callable[[str], Awaitable[Principal | None]]
JobToken = str | Callable[[], str]
"""A job token, or a function giving the current one ("" = none yet)."""


def current_principal() -> Principal:
    """The caller of the RPC being handled (LOCAL_PRINCIPAL when auth is disabled)."""
    return _PRINCIPAL.get()


def current_job_tokens() -> JobTokenVerifier | None:
    """The verifier of job tokens for the RPC being handled (None when auth is disabled)."""
    return _JOB_TOKENS.get()


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, verify: Verify, *, service_label: str, admin_only: bool = False,
                 job_tokens: JobTokenVerifier | None = None) -> None:
        """`job_tokens` defaults to the one of the CachingVerifier whose `verify` is given."""
        self.verify = verify
        self.service_label = service_label
        self.admin_only = admin_only
        self.job_tokens = job_tokens or getattr(getattr(verify, "__self__", None), "job_tokens", None)

    async def intercept_service(self, continuation, handler_call_details):  # noqa: ANN001, ANN201
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        if handler is None or method.lstrip("/").split("/")[0] in OPEN_SERVICES:
            return handler
        token = bearer_token(handler_call_details.invocation_metadata or ())
        try:
            principal = await self.verify(token) if token else None
        except REDIS_DOWN_ERRORS as error:
            log.warning("auth_store_unavailable", method=method, error=str(error))
            return _refusal(handler, grpc.StatusCode.UNAVAILABLE,
                            "cannot verify API keys: the key store (Redis) is unavailable; retry later")
        refused = self._refusal_reason(token, principal)
        if refused is not None:
            log.info("call_refused", method=method, code=refused[0].name)
            return _refusal(handler, *refused)
        return _with_principal(handler, principal, self.job_tokens)

    def _refusal_reason(self, token: str | None, principal: Principal | None) -> tuple[grpc.StatusCode, str] | None:
        if token is None:
            return (grpc.StatusCode.UNAUTHENTICATED,
                    "missing API key: send the metadata 'authorization: Bearer <api key>'")
        if principal is None:
            return grpc.StatusCode.UNAUTHENTICATED, "invalid API key: unknown, revoked or malformed"
        if self.admin_only and not principal.admin:
            return (grpc.StatusCode.PERMISSION_DENIED,
                    f"the {self.service_label} serves OpenTinker's own services and needs an admin "
                    "(service) key; users reach their jobs through the Scheduler")
        return None


def _with_principal(handler: grpc.RpcMethodHandler, principal: Principal,
                    job_tokens: JobTokenVerifier | None) -> grpc.RpcMethodHandler:
    """The same handler, run with `principal` as current_principal() and `job_tokens` as
    current_job_tokens()."""
    def bind(behavior: Callable[..., Any], streaming_response: bool) -> Callable[..., Any]:
        if streaming_response:
            async def stream(request: Any, context: grpc.aio.ServicerContext):  # noqa: ANN202
                tokens = _PRINCIPAL.set(principal), _JOB_TOKENS.set(job_tokens)
                try:
                    async for item in behavior(request, context):
                        yield item
                finally:
                    _reset(tokens)
            return stream

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            tokens = _PRINCIPAL.set(principal), _JOB_TOKENS.set(job_tokens)
            try:
                return await behavior(request, context)
            finally:
                _reset(tokens)
        return unary
    return _rebuild(handler, bind)


def _reset(tokens: tuple[contextvars.Token, contextvars.Token]) -> None:
    _PRINCIPAL.reset(tokens[0])
    _JOB_TOKENS.reset(tokens[1])


def _refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    def bind(behavior: Callable[..., Any], streaming_response: bool) -> Callable[..., Any]:
        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(code, message)
        return refuse
    return _rebuild(handler, bind)


def _rebuild(handler: grpc.RpcMethodHandler,
             bind: Callable[[Callable[..., Any], bool], Callable[..., Any]]) -> grpc.RpcMethodHandler:
    serializers = {"request_deserializer": handler.request_deserializer,
                   "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(bind(handler.unary_unary, False), **serializers)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(bind(handler.unary_stream, True), **serializers)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(bind(handler.stream_unary, False), **serializers)
    return grpc.stream_stream_rpc_method_handler(bind(handler.stream_stream, True), **serializers)


class _Bearer:
    """Adds `authorization: Bearer <key>` (and the job token, when there is one) to a call's metadata."""

    def __init__(self, api_key: str, job_token: JobToken = "") -> None:
        self._header = ("authorization", f"Bearer {api_key}") if api_key else None
        self._job_token = job_token

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        if self._header is not None:
            metadata.add(*self._header)
        job_token = self._job_token() if callable(self._job_token) else self._job_token
        if job_token:
            metadata.add(JOB_TOKEN_METADATA_KEY, job_token)
        return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                          details.wait_for_ready)


# grpc.aio files each interceptor under ONE call type (the first base it matches), so every
# call type needs its own class.
class _BearerUnaryUnary(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):  # noqa: ANN001, ANN201
        return await continuation(self._details(details), request)


class _BearerUnaryStream(_Bearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):  # noqa: ANN001, ANN201
        return await continuation(self._details(details), request)


class _BearerStreamUnary(_Bearer, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, details, request_iterator):  # noqa: ANN001, ANN201
        return await continuation(self._details(details), request_iterator)


class _BearerStreamStream(_Bearer, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, request_iterator):  # noqa: ANN001, ANN201
        return await continuation(self._details(details), request_iterator)


def bearer_interceptors(api_key: str, job_token: JobToken = "") -> list[grpc.aio.ClientInterceptor]:
    return [kind(api_key, job_token) for kind in (_BearerUnaryUnary, _BearerUnaryStream, _BearerStreamUnary,
                                                  _BearerStreamStream)]


RECONNECT_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                     ("grpc.max_reconnect_backoff_ms", 500))
"""Every channel between services redials a peer that went away within half a second of its return
(gRPC's defaults back off up to 120 s, so a service back after an outage stayed unreachable for
seconds and the calls in that window failed)."""


def authenticated_channel(address: str, api_key: str = "", *, options: Sequence[tuple[str, Any]] = (),
                          job_token: JobToken = "") -> grpc.aio.Channel:
    """An aio channel to `address` that sends `api_key` with every call (none when empty) and,
    for a channel serving one attempt of a job, its `job_token` (a text, or a function called
    on each call, for a channel opened before the token is known). It reconnects promptly
    (RECONNECT_OPTIONS; `options` may override them)."""
    interceptors = bearer_interceptors(api_key, job_token) if api_key or job_token else None
    return grpc.aio.insecure_channel(address, options=[*RECONNECT_OPTIONS, *options], interceptors=interceptors)


class JobTokenSlot:
    """A job token learnt after its channel was opened: `authenticated_channel(..., job_token=slot)`,
    then `slot.set(token)`; calls carry the token from then on."""

    def __init__(self) -> None:
        self.token = ""

    def set(self, token: str) -> None:
        self.token = token

    def __call__(self) -> str:
        return self.token
