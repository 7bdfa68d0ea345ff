"""The fork server: one small process per EnvHost that forks a process for each game session.

    python -m opentinker_envhost.sandbox_forkserver CONTROL_FD PARENT_PID

The EnvHost starts it (`sandbox.Sandbox`) with one end of a SOCK_SEQPACKET socket pair. It
imports the games once (the hello message names them and the EnvHost's sys.path), so a new
session costs a fork, not a Python start; it never imports grpc and runs one thread, so
forking is safe. It forks on request, reaps its children, reports each one's wait status,
kills on request (only processes it has not reaped yet, so a recycled pid is never hit), and
when the EnvHost goes away (end of the control socket; or PARENT_DEATH_SIGNAL, which the kernel
sends when the EnvHost dies, even by SIGKILL) it kills every game process with its process
group (so whatever a game started goes too) and exits. It runs in its own process group and
ignores SIGINT and SIGTERM: the EnvHost decides when its games stop. Each game process is
SIGKILLed by the kernel if the fork server dies first.
"""

from __future__ import annotations

import contextlib
import gc
import os
import selectors
import signal
import socket
import sys
from typing import Any

from opentinker_env import GameClass
from opentinker_runtime.games import builtin_games, load_game_class
from opentinker_envhost import sandbox_protocol as wire
from opentinker_envhost.sandbox_child import ChildLimits, run_child, set_parent_death_signal

BUILTIN_SOURCE = "builtin"
PARENT_DEATH_SIGNAL = signal.SIGUSR1


def load_games(entries: list[list[str]]) -> tuple[dict[str, GameClass], dict[str, str]]:
    """Classes by name from [name, source] pairs ("builtin" or "module:Class"); and the
    error of each that failed to load."""
    games: dict[str, GameClass] = {}
    errors: dict[str, str] = {}
    for name, source in entries:
        try:
            games[name] = builtin_games()[name] if source == BUILTIN_SOURCE else load_game_class(source)
        except Exception as error:  # noqa: BLE001 - user modules may raise anything on import
            errors[name] = f"{type(error).__name__}: {error}"
    return games, errors


class ForkServer:
    """Serves the control socket until the EnvHost closes it."""

    def __init__(self, control: socket.socket, parent_pid: int) -> None:
        self.control = control
        self.parent_pid = parent_pid
        self.games: dict[str, GameClass] = {}
        self.load_errors: dict[str, str] = {}
        self.limits: ChildLimits | None = None
        self.children: set[int] = set()
        self.parent_gone = False
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()

    def run(self) -> int:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through wake_w
        signal.signal(PARENT_DEATH_SIGNAL, self._on_parent_death)
        set_parent_death_signal(PARENT_DEATH_SIGNAL)
        self.parent_gone = os.getppid() != self.parent_pid  # it died before the signal was set
        self.selector.register(self.control, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        while True:
            if self.parent_gone:
                return self._shutdown()
            for key, _ in self.selector.select():
                if key.fileobj is self.control:
                    received = self._receive()
                    if received is None:
                        return self._shutdown()
                    self._handle(*received)
                else:
                    self._drain_wakeups()
                    self._reap()

    def _receive(self) -> tuple[dict[str, Any], list[int]] | None:
        try:
            data, fds, _flags, _address = socket.recv_fds(self.control, wire.MAX_CONTROL_PACKET, 4)
        except OSError:
            return None
        if not data:
            for fd in fds:
                os.close(fd)
            return None
        return wire.decode(data), fds

    def _send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the EnvHost is gone: the next receive ends us
            self.control.send(wire.encode(message))

    def _handle(self, message: dict[str, Any], fds: list[int]) -> None:
        if "hello" in message:
            self._hello(message["hello"])
        elif "spawn" in message:
            self._spawn(message["spawn"], message["id"], fds)
            fds = []
        elif "kill" in message:
            self._kill(int(message["kill"]))
        for fd in fds:
            os.close(fd)

    def _hello(self, hello: dict[str, Any]) -> None:
        sys.path[:0] = [entry for entry in hello["sys_path"] if entry not in sys.path]
        self.limits = ChildLimits(**hello["limits"])
        self.games, self.load_errors = load_games(hello["games"])
        gc.freeze()  # what the games imported stays shared with every child (no copy on write)
        self._send({"ready": {"pid": os.getpid(), "load_errors": self.load_errors}})

    def _spawn(self, name: str, request_id: int, fds: list[int]) -> None:
        game_cls = self.games.get(name)
        if game_cls is None or self.limits is None or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            error = self.load_errors.get(name, f"no game {name!r} was loaded")
            self._send({"spawn_failed": request_id, "error": error})
            return
        server_pid = os.getpid()
        try:
            pid = os.fork()
        except OSError as error:
            pid = -1
            self._send({"spawn_failed": request_id, "error": f"fork failed: {error}"})
        if pid == 0:
            self._become_child()
            run_child(fds[0], fds[1], game_cls, self.limits, parent_pid=server_pid)
        for fd in fds:
            os.close(fd)
        if pid > 0:
            self.children.add(pid)
            self._send({"spawned": request_id, "pid": pid})

    def _on_parent_death(self, *_: object) -> None:
        self.parent_gone = True  # the loop sees it after the wakeup fd ends its select()

    def _become_child(self) -> None:
        """Drop what belongs to the fork server: a game cannot reach the control socket."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(PARENT_DEATH_SIGNAL, signal.SIG_DFL)
        self.selector.close()
        self.control.close()
        os.close(self.wake_r)
        os.close(self.wake_w)

    def _kill(self, pid: int) -> None:
        """SIGKILL a game process and its process group, unless it was already reaped."""
        if pid not in self.children:
            return
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # not yet in its own group right after the fork

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_r, 512):
                pass

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            with contextlib.suppress(OSError):  # whatever the game started in its group
                os.killpg(pid, signal.SIGKILL)
            self._send({"exited": pid, "status": status})

    def _shutdown(self) -> int:
        for pid in list(self.children):
            self._kill(pid)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        return 0


def main(argv: list[str] | None = None) -> int:
    control_fd, parent_pid = (int(arg) for arg in (argv or sys.argv[1:])[:2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return ForkServer(socket.socket(fileno=control_fd), parent_pid).run()


if __name__ == "__main__":
    sys.exit(main())
