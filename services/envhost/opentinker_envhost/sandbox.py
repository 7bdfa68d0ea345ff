"""Process isolation (the default): each session's game runs in its own process.

`Sandbox` is the EnvHost's side of the fork server (`sandbox_forkserver`), which it starts on
first use (or at service start) with the catalog's games preloaded; a session costs one fork
(`spawn`). The control socket is served on the event loop (`ControlChannel`: no thread per
session or per game): spawn requests carry the game's session socket and output pipe, kill
requests name a pid, and the fork server reports the wait status of every game process it
reaps, which is how a session learns why its game died. If the fork server dies, its games die
with it (their death signal), their sessions fail, and the next open starts a new one.
A session opened for an owner (tenant, job, attempt) may get a warm process instead of a fork:
one whose earlier session of the same owner, game and config ended cleanly (`sandbox_pool`).
`shutdown` closes the control socket: the fork server kills every game process and exits.
The fork server, and so every game, runs without the EnvHost's OPENTINKER_* variables (its API
key among them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import structlog

from opentinker_envhost import sandbox_protocol as wire
from opentinker_envhost.catalog import GameCatalog, GameSpec
from opentinker_envhost.errors import EnvironmentFailure
from opentinker_envhost.game_output import GameOutput
from opentinker_envhost.limits import SessionLimits
from opentinker_envhost.sandbox_child import ChildLimits
from opentinker_envhost.sandbox_connection import GameConnection, GameProcess
from opentinker_envhost.sandbox_pool import OwnerKey, WarmPool
from opentinker_envhost.sandboxed_game import SandboxedGame
from opentinker_envhost.shared_game import SharedGame
from opentinker_envhost.shared_placement import SharedPlacement

FORKSERVER_MODULE = "opentinker_envhost.sandbox_forkserver"
SERVICE_ENV_PREFIX = "OPENTINKER_"
START_TIMEOUT_S = 60.0
SPAWN_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0

log = structlog.get_logger(__name__)


class ControlChannel:
    """The EnvHost's end of the control socket, on the running event loop: `send` never blocks
    (messages wait in order while the socket is full), every message received goes to
    `on_message`, and `on_closed` runs once when the channel ends."""

    def __init__(self, sock: socket.socket, on_message: Callable[[dict[str, Any]], None],
                 on_closed: Callable[[], None]) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.on_message = on_message
        self.on_closed = on_closed
        self.loop = asyncio.get_running_loop()
        self.queue: collections.deque[tuple[bytes, list[int]]] = collections.deque()
        self.writing = False
        self.closed = False
        self.loop.add_reader(sock.fileno(), self._readable)

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        """Send `message` with `fds` attached; the fds are closed here once sent (or dropped)."""
        self.queue.append((wire.encode(message), list(fds or ())))
        if self.closed:
            self._drop_queue()
        else:
            self._flush()

    def close(self) -> None:
        if self.closed:
            return
        if not self.loop.is_closed():
            self.loop.remove_reader(self.sock.fileno())
            if self.writing:
                self.loop.remove_writer(self.sock.fileno())
        self.abandon()
        self.on_closed()

    def abandon(self) -> None:
        """Close the socket without telling anyone (its event loop may be gone)."""
        self.closed = True
        self._drop_queue()
        self.sock.close()

    def _flush(self) -> None:
        while self.queue:
            payload, fds = self.queue[0]
            try:
                if fds:
                    socket.send_fds(self.sock, [payload], fds)
                else:
                    self.sock.send(payload)
            except BlockingIOError:
                if not self.writing:
                    self.loop.add_writer(self.sock.fileno(), self._flush)
                    self.writing = True
                return
            except OSError:
                self.close()
                return
            self.queue.popleft()
            _close_fds(fds)
        if self.writing:
            self.loop.remove_writer(self.sock.fileno())
            self.writing = False

    def _readable(self) -> None:
        while not self.closed:
            try:
                data = self.sock.recv(wire.MAX_CONTROL_PACKET)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.close()
                return
            self.on_message(wire.decode(data))

    def _drop_queue(self) -> None:
        while self.queue:
            _close_fds(self.queue.popleft()[1])


class Sandbox:
    """Opens games in processes forked by this EnvHost's fork server."""

    def __init__(self, catalog: GameCatalog, limits: SessionLimits) -> None:
        self.catalog = catalog
        self.limits = limits
        self.child_limits = ChildLimits(memory_limit_mb=limits.memory_limit_mb,
                                        cpu_seconds_per_call=limits.cpu_seconds_per_call,
                                        max_observation_chars=limits.max_observation_chars,
                                        frame_limit=wire.frame_limit(limits.max_observation_chars))
        self.process: subprocess.Popen[bytes] | None = None
        self.channel: ControlChannel | None = None
        self.ready: asyncio.Future[dict[str, Any]] | None = None
        self.spawns: dict[int, asyncio.Future[int]] = {}
        self.exits: dict[int, asyncio.Future[int | None]] = {}
        self.request_ids = itertools.count(1)
        self.starting = asyncio.Lock()
        self.stopping = False
        self.pool = WarmPool(limits.warm_processes, limits.warm_idle_s)
        self.placement = SharedPlacement(limits, get_process=self._process_for, keep=self._keep_shared,
                                         retire=self._retire, kill=self.kill)

    @property
    def running(self) -> bool:
        return self.channel is not None and not self.channel.closed

    async def start(self) -> None:
        """Start the fork server unless it runs; EnvironmentFailure if it cannot start."""
        async with self.starting:
            if self.running and self.channel.loop is asyncio.get_running_loop():  # type: ignore[union-attr]
                return
            self._abandon()
            await self._start_forkserver()

    async def open(self, spec: GameSpec, config: dict[str, Any], session_id: str,
                   owner: OwnerKey = ()) -> SandboxedGame | SharedGame:
        """The game built in a process shared with other sessions of (`owner`, game, config)
        when sessions_per_process > 1 (`shared_placement`), else in a warm process kept for that
        key, or in a new one; sessions with no owner always get a new process, which exits when
        they close."""
        if owner and self.limits.sessions_per_process > 1:
            shared_key = (*owner, spec.name, json.dumps(config, sort_keys=True))
            return await SharedGame.open(self.placement, shared_key, spec, config, session_id=session_id,
                                         limits=self.limits)
        key = (*owner, spec.name, json.dumps(config, sort_keys=True)) if owner and self.pool.capacity else ()
        process = self._take_warm(key) if key else None
        if process is None:
            process = await self._spawn(spec.name, key)
        return await SandboxedGame.open(process, spec, config, session_id=session_id, limits=self.limits,
                                        kill=self.kill, release=self._keep if key else None)

    def reap_idle(self) -> int:
        """Retire the warm processes idle past their TTL; how many."""
        expired = self.pool.expired()
        for process in expired:
            self._retire(process)
        return len(expired)

    def kill(self, pid: int) -> None:
        """SIGKILL game process `pid` (its wait status arrives as usual)."""
        if self.running:
            self.channel.send({"kill": pid})  # type: ignore[union-attr]

    async def shutdown(self) -> None:
        """Close the control socket: the fork server kills its game processes and exits."""
        async with self.starting:
            self.stopping = True
            try:
                await self.placement.shutdown()
                for process in self.pool.clear():
                    self._retire(process)
                if self.channel is not None:
                    self.channel.close()
                await self._wait_forkserver(STOP_TIMEOUT_S)
            finally:
                self.stopping = False

    async def _start_forkserver(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", FORKSERVER_MODULE, str(theirs.fileno()), str(os.getpid())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=games_environment(),
                process_group=0)  # a signal to the EnvHost's group leaves its games to the EnvHost
        except OSError as error:
            ours.close()
            raise EnvironmentFailure(f"the games' fork server could not start: {error}") from None
        finally:
            theirs.close()
        self.ready = asyncio.get_running_loop().create_future()
        self.channel = ControlChannel(ours, self._on_message, self._on_closed)
        self.channel.send({"hello": {"sys_path": sys.path, "limits": asdict(self.child_limits),
                                     "games": [[s.name, s.source] for s in self.catalog.specs.values()]}})
        try:
            ready = await asyncio.wait_for(asyncio.shield(self.ready), START_TIMEOUT_S)
        except (TimeoutError, EnvironmentFailure) as error:
            self._abandon()
            raise EnvironmentFailure(f"the games' fork server did not start: {error}") from None
        log.info("sandbox_started", forkserver_pid=ready["pid"], load_errors=ready["load_errors"],
                 memory_limit_mb=self.limits.memory_limit_mb,
                 cpu_seconds_per_call=self.limits.cpu_seconds_per_call)

    async def _spawn(self, name: str, owner_key: OwnerKey) -> GameProcess:
        await self.start()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        output_r, output_w = os.pipe()
        request_id = next(self.request_ids)
        future = self.spawns[request_id] = asyncio.get_running_loop().create_future()
        self.channel.send({"spawn": name, "id": request_id}, fds=[theirs.detach(), output_w])  # type: ignore[union-attr]
        try:
            pid = await asyncio.wait_for(future, SPAWN_TIMEOUT_S)
        except BaseException:
            ours.close()  # a process forked after all reads end of stream and exits
            os.close(output_r)
            raise
        finally:
            self.spawns.pop(request_id, None)
        output = GameOutput(output_r, session_id="", env_name=name)
        process = GameProcess(pid=pid, connection=await GameConnection.open(ours, self.child_limits.frame_limit),
                              output=output, exited=self.exits[pid], owner_key=owner_key)
        if owner_key:
            process.exited.add_done_callback(lambda _: self._forget_if_idle(process))
        return process

    async def _process_for(self, key: OwnerKey) -> GameProcess:
        """A process for a shared key: one it left warm, else a new fork (key[-2] is the game)."""
        process = self._take_warm(key) if self.pool.capacity else None
        return process if process is not None else await self._spawn(key[-2], key)

    def _keep_shared(self, process: GameProcess) -> None:
        """A shared process whose last session left cleanly: warm for the next of its key."""
        process.output.end_session()
        self._keep(process)

    def _take_warm(self, key: OwnerKey) -> GameProcess | None:
        while (process := self.pool.take(key)) is not None and not process.alive:
            self._retire(process)  # died while idle, its end not reported yet
        return process

    def _keep(self, process: GameProcess) -> None:
        """A session's process may serve the next session of its key."""
        if not self.running or not process.alive:
            self._retire(process)
            return
        for pushed_out in self.pool.put(process):
            self._retire(pushed_out)

    def _retire(self, process: GameProcess) -> None:
        """Kill a process that serves no session; our ends close once it is reaped."""
        if process.exited.done():
            process.close_ends()
            return
        process.exited.add_done_callback(lambda _: process.close_ends())
        self.kill(process.pid)

    def _forget_if_idle(self, process: GameProcess) -> None:
        """An idle process died (the OOM killer, a signal): drop it from the pool."""
        if self.pool.remove(process):
            process.close_ends()

    def _on_message(self, message: dict[str, Any]) -> None:
        if "spawned" in message:
            pid = message["pid"]
            self.exits[pid] = asyncio.get_running_loop().create_future()
            _settle(self.spawns.get(message["spawned"]), pid)
        elif "exited" in message:
            _settle(self.exits.pop(message["exited"], None), message["status"])
        elif "spawn_failed" in message:
            _fail(self.spawns.get(message["spawn_failed"]),
                  EnvironmentFailure(f"the game's process could not start: {message['error']}"))
        elif "ready" in message:
            _settle(self.ready, message["ready"])

    def _on_closed(self) -> None:
        """The fork server is gone: whatever waits on it learns so."""
        gone = EnvironmentFailure("the games' fork server exited")
        _fail(self.ready, gone)
        for future in self.spawns.values():
            _fail(future, gone)
        for future in self.exits.values():
            _settle(future, None)
        self.exits.clear()
        if not self.stopping:
            log.warning("sandbox_forkserver_lost", pid=self.process.pid if self.process else None)

    def _abandon(self) -> None:
        """Drop a fork server from an earlier event loop (or a failed start) at once: closing
        its socket ends it and its games; what waited on it belonged to that loop."""
        if self.channel is not None and not self.channel.closed:
            if self.channel.loop is asyncio.get_running_loop():
                self.channel.close()
            else:
                self.channel.abandon()
        self.pool.clear()  # their processes die with the fork server
        self.spawns.clear()
        self.exits.clear()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    async def _wait_forkserver(self, timeout: float) -> None:
        if self.process is None:
            return
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self.process.poll() is None:
            log.warning("sandbox_forkserver_killed", pid=self.process.pid, timeout_s=timeout)
            self.process.kill()
            self.process.wait()


def games_environment() -> dict[str, str]:
    """The EnvHost's environment without OPENTINKER_* variables: game code never sees the
    service's API key, its Redis URL (and password) or its settings."""
    return {name: value for name, value in os.environ.items() if not name.startswith(SERVICE_ENV_PREFIX)}


def _settle(future: asyncio.Future[Any] | None, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)


def _fail(future: asyncio.Future[Any] | None, error: BaseException) -> None:
    if future is not None and not future.done():
        future.set_exception(error)
        future.exception()  # retrieved: nobody may be waiting


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
