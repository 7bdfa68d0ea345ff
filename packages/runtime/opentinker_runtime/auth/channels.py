"""The client side of API-key authentication: `authenticated_channel(address, api_key, job_token=...)`
is an aio channel that adds the key (and a job's token, `x-opentinker-job-token`) to every call
and redials a peer that went away promptly. The server side is `opentinker_runtime.auth.interceptor`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from opentinker_runtime.auth.job_tokens import JOB_TOKEN_METADATA_KEY
from opentinker_runtime.auth.tls import channel_credentials, channels_tls

JobToken = str | Callable[[], str]
"""A job token, or a function giving the current one ("" = none yet)."""


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
    (RECONNECT_OPTIONS; `options` may override them). Over TLS when this process's settings say
    so (`auth.tls.use_for_channels`)."""
    interceptors = bearer_interceptors(api_key, job_token) if api_key or job_token else None
    tls = channels_tls()
    if tls.enabled:  # OPENTINKER_TLS: every peer over TLS, checked against the stack's CA
        return grpc.aio.secure_channel(address, channel_credentials(tls), options=[*RECONNECT_OPTIONS, *options],
                                       interceptors=interceptors)
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
