"""API-key authentication for every OpenTinker gRPC server, and the key on outgoing channels.

Server side: `AuthInterceptor` reads `authorization: Bearer <key>` on every call (health checks
and reflection stay open), verifies the key (`opentinker_runtime.auth.api_keys`), and runs the handler with
the caller's `Principal` in `current_principal()`. Missing, malformed, unknown or revoked keys get
UNAUTHENTICATED; a service for OpenTinker's own processes (`admin_only`) answers a tenant key
with PERMISSION_DENIED. Keys never reach logs: only their public id does. The interceptor also
makes its `JobTokenVerifier` the handler's `current_job_tokens()`, which job-scoped handlers use
through `opentinker_runtime.edge.job_token` (None when auth is off: no job token is checked).

A server that serves jobs at addresses a tenant may choose (the EnvHost) also accepts a job's
token as a call's only credential (`job_credentials`, see opentinker_runtime.auth.job_credentials): the
principal is then the job's tenant, scoped to that job. Outside a call, and on a server whose
interceptor did not set one, the principal is NOBODY (no tenant, no rights): fail closed.

The client side (the key on outgoing channels) is `opentinker_runtime.auth.channels`.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import structlog

from opentinker_runtime.auth.api_keys import Principal, bearer_token
from opentinker_runtime.auth.job_credentials import JobCredentials, JobCredentialsUnavailable
from opentinker_runtime.auth.job_tokens import (
    JOB_ID_METADATA_KEY,
    JOB_TOKEN_METADATA_KEY,
    JobTokenVerifier,
    presented_job_id,
    presented_job_token,
)
from opentinker_runtime.core.redis_store import REDIS_DOWN_ERRORS

log = structlog.get_logger(__name__)

OPEN_SERVICES = frozenset({"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                           "grpc.reflection.v1.ServerReflection"})
LOCAL_PRINCIPAL = Principal(tenant_id="default", admin=True, key_id="")
"""Who every caller is when auth is disabled (OPENTINKER_AUTH=disabled, local use only; bound by
LocalPrincipalInterceptor)."""
NOBODY = Principal(tenant_id="", admin=False, key_id="")
"""Who acts outside a call (or where no interceptor said who calls): nobody, with no rights."""
_PRINCIPAL: contextvars.ContextVar[Principal] = contextvars.ContextVar("opentinker_principal", default=NOBODY)
_JOB_TOKENS: contextvars.ContextVar[JobTokenVerifier | None] = contextvars.ContextVar("opentinker_job_tokens",
                                                                                 default=None)
Verify = Callable[[str], Awaitable[Principal | None]]


def current_principal() -> Principal:
    """The caller of the RPC being handled (LOCAL_PRINCIPAL when auth is disabled, NOBODY outside
    a call)."""
    return _PRINCIPAL.get()


def current_job_tokens() -> JobTokenVerifier | None:
    """The verifier of job tokens for the RPC being handled (None when auth is disabled)."""
    return _JOB_TOKENS.get()


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, verify: Verify | None, *, service_label: str, admin_only: bool = False,
                 job_tokens: JobTokenVerifier | None = None, job_credentials: JobCredentials | None = None) -> None:
        """`job_tokens` defaults to the one of the CachingVerifier whose `verify` is given.
        `job_credentials`: also accept a job's token (with its job id) as a call's only credential.
        `verify` None: API keys are not accepted at all (an EnvHost a tenant serves itself)."""
        self.verify = verify
        self.service_label = service_label
        self.admin_only = admin_only
        self.job_tokens = job_tokens or getattr(getattr(verify, "__self__", None), "job_tokens", None)
        self.job_credentials = job_credentials

    async def intercept_service(self, continuation, handler_call_details):  # noqa: ANN001, ANN201
        handler = await continuation(handler_call_details)
        method = handler_call_details.method or ""
        if handler is None or method.lstrip("/").split("/")[0] in OPEN_SERVICES:
            return handler
        metadata = handler_call_details.invocation_metadata or ()
        token = bearer_token(metadata)
        try:
            principal = await self._principal(token, metadata)
        except (*REDIS_DOWN_ERRORS, JobCredentialsUnavailable) as error:
            log.warning("auth_store_unavailable", method=method, error=str(error))
            return _refusal(handler, grpc.StatusCode.UNAVAILABLE,
                            "cannot verify the call's credentials: the key store is unavailable; retry later")
        refused = self._refusal_reason(token, principal, metadata)
        if refused is not None:
            log.info("call_refused", method=method, code=refused[0].name)
            return _refusal(handler, *refused)
        return _with_principal(handler, principal, self.job_tokens)

    async def _principal(self, token: str | None, metadata: Any) -> Principal | None:
        if token is not None:
            return await self.verify(token) if self.verify is not None else None
        job_token, job_id = presented_job_token(metadata), presented_job_id(metadata)
        if self.job_credentials is None or not job_token or not job_id:
            return None
        tenant = await self.job_credentials.tenant_of(job_id, job_token)
        return None if tenant is None else Principal(tenant_id=tenant, admin=False, job_id=job_id)

    def _refusal_reason(self, token: str | None, principal: Principal | None,
                        metadata: Any) -> tuple[grpc.StatusCode, str] | None:
        if principal is None:
            return self._unauthenticated(token, metadata)
        if self.admin_only and not principal.admin and not principal.job_id:
            return (grpc.StatusCode.PERMISSION_DENIED,
                    f"the {self.service_label} serves OpenTinker's own services and needs an admin "
                    "(service) key; users reach their jobs through the Scheduler")
        return None

    def _unauthenticated(self, token: str | None, metadata: Any) -> tuple[grpc.StatusCode, str]:
        if token is not None and self.verify is None:
            return (grpc.StatusCode.UNAUTHENTICATED, f"this {self.service_label} serves one tenant's jobs and accepts "
                    f"only their job tokens ({JOB_TOKEN_METADATA_KEY} with {JOB_ID_METADATA_KEY}), no API keys")
        if token is not None:
            return grpc.StatusCode.UNAUTHENTICATED, "invalid API key: unknown, revoked or malformed"
        if self.job_credentials is not None and presented_job_token(metadata):
            return (grpc.StatusCode.UNAUTHENTICATED, f"invalid job token: not the running attempt's token of the job "
                    f"{JOB_ID_METADATA_KEY} names (or no {JOB_ID_METADATA_KEY} sent)")
        return (grpc.StatusCode.UNAUTHENTICATED,
                "missing API key: send the metadata 'authorization: Bearer <api key>'")


class LocalPrincipalInterceptor(grpc.aio.ServerInterceptor):
    """Auth disabled (OPENTINKER_AUTH=disabled): every call acts as LOCAL_PRINCIPAL, said explicitly
    (the default outside an interceptor is NOBODY)."""

    async def intercept_service(self, continuation, handler_call_details):  # noqa: ANN001, ANN201
        handler = await continuation(handler_call_details)
        return handler if handler is None else _with_principal(handler, LOCAL_PRINCIPAL, None)


def _with_principal(handler: grpc.RpcMethodHandler, principal: Principal,
                    job_tokens: JobTokenVerifier | None) -> grpc.RpcMethodHandler:
    """The same handler, run with `principal` as current_principal() and `job_tokens` as
    current_job_tokens()."""
    def bind(behavior: Callable[..., Any], streaming_response: bool) -> Callable[..., Any]:
        if streaming_response and inspect.isasyncgenfunction(behavior):
            async def stream(request: Any, context: grpc.aio.ServicerContext):  # noqa: ANN202
                tokens = _PRINCIPAL.set(principal), _JOB_TOKENS.set(job_tokens)
                try:
                    async for item in behavior(request, context):
                        yield item
                finally:
                    _reset(tokens)
            return stream

        # a unary response, or a stream the handler writes with context.write() (a coroutine: no
        # async generator between gRPC and it, whose every resumption would pass through one)
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
