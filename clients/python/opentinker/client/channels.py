"""A blocking gRPC channel that sends an API key with every call, for calling a service directly:

    with keyed_channel("127.0.0.1:50051", resolve_api_key()) as channel:
        stub = SchedulerServiceStub(channel)
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from opentinker.client.tls import open_channel


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                           "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self, api_key: str) -> None:
        self.header = ("authorization", f"Bearer {api_key}")

    def _details(self, details):  # noqa: ANN001, ANN202
        metadata = [*(details.metadata or ()), self.header]
        return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                            details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation, details, request):  # noqa: ANN001, ANN201
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):  # noqa: ANN001, ANN201
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):  # noqa: ANN001, ANN201
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):  # noqa: ANN001, ANN201
        return continuation(self._details(details), requests)


@contextmanager
def keyed_channel(address: str, api_key: str) -> Iterator[grpc.Channel]:
    with open_channel(address) as channel:  # over TLS when the environment names the stack's CA
        yield grpc.intercept_channel(channel, _Bearer(api_key))
