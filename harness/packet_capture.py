"""A packet capture without tcpdump: an AF_PACKET raw socket (root, or CAP_NET_RAW) on `lo`, or
on the links of several hosts (`harness.netns`), keeping the TCP payloads to or from given ports."""

from __future__ import annotations

import os
import socket
import struct
import threading

ETH_P_ALL = 0x0003
ETH_HEADER = 14


def can_capture() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL)).close()
    except (PermissionError, OSError, AttributeError):
        return False
    return True


class LoopbackCapture:
    """`with LoopbackCapture(ports) as capture: ...`; then `capture.payload` holds every TCP
    payload byte seen to or from `ports` on lo, in order of capture. `interfaces`: instead of lo,
    every interface of this namespace whose name starts with one of them (the hosts' links)."""

    def __init__(self, ports: set[int], interfaces: tuple[str, ...] = ()) -> None:
        self.ports = ports
        self.interfaces = interfaces
        self.chunks: list[bytes] = []
        self.packets = 0
        self.pairs: set[tuple[str, str]] = set()
        """(source, destination) IPv4 addresses of the TCP segments kept."""
        self._stop = threading.Event()
        self._socket = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
        if not interfaces:
            self._socket.bind(("lo", 0))
        self._socket.settimeout(0.2)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoopbackCapture:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._socket.close()

    @property
    def payload(self) -> bytes:
        return b"".join(self.chunks)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                frame, address = self._socket.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            if self.interfaces:
                if address[0].startswith(self.interfaces):
                    self._keep(frame)  # both directions: a frame between two hosts is seen twice
                continue
            if address[2] == socket.PACKET_OUTGOING:  # lo shows each packet twice: keep the incoming copy
                continue
            self._keep(frame)

    def _keep(self, frame: bytes) -> None:
        if len(frame) < ETH_HEADER + 20 or frame[12:14] != b"\x08\x00":  # IPv4 only (the stack's 127.0.0.1)
            return
        ip = frame[ETH_HEADER:]
        header = (ip[0] & 0x0F) * 4
        if ip[9] != socket.IPPROTO_TCP:
            return
        total = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[header:total]
        source, destination = struct.unpack("!HH", tcp[:4])
        if source not in self.ports and destination not in self.ports:
            return
        offset = (tcp[12] >> 4) * 4
        self.pairs.add((socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])))
        if len(tcp) > offset:
            self.chunks.append(bytes(tcp[offset:]))
            self.packets += 1


def send_marker_in_clear(address: str, marker: str, *, retry_seconds: float = 30.0) -> None:
    """A plaintext gRPC call to `address` carrying `marker` in its body (a capture's control: it
    must be seen in clear). Returns once the request went out (any gRPC server answers OK or
    NOT_FOUND for a health check of an unknown service); retries other failures (the server
    still starting) for `retry_seconds`."""
    import time

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + retry_seconds
    while True:
        with grpc.insecure_channel(address) as channel:
            try:
                health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=marker), timeout=5)
                return
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    return
                if time.monotonic() > deadline:
                    raise
        time.sleep(0.5)
