"""TCP proxies between services that can cut every open connection at once (a network fault).

Each `Proxy` listens on its own port and forwards to one service's real port; `drop_all()`
resets every connection through it (RST, not FIN: peers see the connection die mid-call), so
in-flight RPCs fail with UNAVAILABLE and channels must reconnect. All proxies run on one
asyncio loop in a daemon thread of the test process.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

HOST = "127.0.0.1"
CHUNK = 1 << 16


@dataclass
class Proxy:
    name: str
    listen_port: int
    target_port: int
    connections: set[asyncio.StreamWriter] = field(default_factory=set)
    drops: int = 0
    """How many times drop_all() cut at least one live connection."""
    cut: int = 0
    """Connections cut in all."""

    @property
    def address(self) -> str:
        return f"{HOST}:{self.listen_port}"


class ProxyLoop:
    """Owns the proxies and the loop they run on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="chaos-proxies", daemon=True)
        self.thread.start()
        self.proxies: dict[str, Proxy] = {}
        self._servers: list[asyncio.base_events.Server] = []

    def add(self, name: str, listen_port: int, target_port: int) -> Proxy:
        proxy = Proxy(name, listen_port, target_port)
        self._run(self._serve(proxy)).result(timeout=10)
        self.proxies[name] = proxy
        return proxy

    def drop_all(self, name: str) -> int:
        """Reset every open connection through proxy `name`; returns how many were cut."""
        return self._run(self._drop(self.proxies[name])).result(timeout=10)

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            for proxy in self.proxies.values():
                await self._drop(proxy)
        with contextlib.suppress(Exception):
            self._run(stop()).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    def _run(self, coroutine) -> Future:  # noqa: ANN001
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def _serve(self, proxy: Proxy) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._pipe_to_target(proxy, reader, writer)
        server = await asyncio.start_server(handle, HOST, proxy.listen_port, reuse_address=True)
        self._servers.append(server)

    async def _pipe_to_target(self, proxy: Proxy, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection(HOST, proxy.target_port)
        except OSError:  # the service is down: refuse like it would
            _reset(writer)
            return
        proxy.connections.update((writer, target_writer))
        try:
            await asyncio.gather(_copy(reader, target_writer), _copy(target_reader, writer))
        finally:
            for end in (writer, target_writer):
                proxy.connections.discard(end)
                with contextlib.suppress(Exception):
                    end.close()

    async def _drop(self, proxy: Proxy) -> int:
        live = list(proxy.connections)
        for end in live:
            _reset(end)
        proxy.connections.clear()
        if live:
            proxy.drops += 1
            proxy.cut += len(live) // 2
        return len(live) // 2


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST: SO_LINGER on, timeout 0."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(Exception):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()
