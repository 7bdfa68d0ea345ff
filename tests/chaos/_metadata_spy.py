"""A gRPC server that logs every call's metadata and forwards the call, bytes as they are, to a
real server: what an attacker would put at an address a job's EnvHost calls reach. Unary calls
only (the Rollout's and the Coordinator's EnvHost clients make no others)."""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc

FORWARDED_PREFIXES = ("authorization", "x-opentinker-")


@dataclass
class SeenCall:
    method: str
    metadata: tuple[tuple[str, str], ...]


@dataclass
class MetadataSpy:
    """`start(port)`, then every call lands in `calls`; `stop()`."""

    target: str
    calls: list[SeenCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, port: int) -> None:
        self.channel = grpc.insecure_channel(self.target)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self.server.add_generic_rpc_handlers([_Forwarder(self)])
        self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(None)
        self.channel.close()

    def seen(self, method: str, metadata: tuple[tuple[str, str], ...]) -> None:
        with self._lock:
            self.calls.append(SeenCall(method=method, metadata=metadata))

    def values(self) -> list[str]:
        """Every metadata value any call carried."""
        with self._lock:
            return [value for call in self.calls for _, value in call.metadata]


class _Forwarder(grpc.GenericRpcHandler):
    def __init__(self, spy: MetadataSpy) -> None:
        self.spy = spy

    def service(self, handler_call_details):  # noqa: ANN001, ANN201
        method = handler_call_details.method
        metadata = tuple((k, v if isinstance(v, str) else v.decode(errors="replace"))
                         for k, v in handler_call_details.invocation_metadata or ())
        self.spy.seen(method, metadata)
        forward = self.spy.channel.unary_unary(method)  # bytes in, bytes out

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            passed = [(k, v) for k, v in metadata if k.startswith(FORWARDED_PREFIXES)]
            try:
                return forward(request, metadata=passed, timeout=60)
            except grpc.RpcError as error:
                context.abort(error.code(), error.details())

        return grpc.unary_unary_rpc_method_handler(handle)
