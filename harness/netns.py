"""Several "hosts" on one machine: Linux network namespaces joined by veth pairs to a bridge.

    with HostNetwork(["control", "worker-a", "worker-b", "laptop"]) as net:
        net.address("worker-a")                  # "10.77.<n>.2": its own address, no 127.0.0.1
        net.popen("worker-a", [...], env=..., log=path)   # a process on that host
        net.cut("worker-a"); net.restore("worker-a")      # its link down, then up again

Each host is a namespace `ot<n>-<index>` with its loopback and one interface `eth0` (10.77.<n>.i/24)
whose peer is enslaved to the bridge `otbr<n>` in the root namespace; the bridge has 10.77.<n>.254,
so the test process (root namespace) reaches every host and the hosts reach each other only over
the bridge. Cutting a host sets its peer down: its processes keep running and see no network. Needs
root (or CAP_NET_ADMIN); `available()` says whether this machine can. The filesystem is shared:
the hosts see the same checkpoint directory (as shared storage would).

The subnet index <n> is claimed with a lock file (`/tmp/opentinker-netns-<n>.lock`, flock, held
until `tear_down`): runs in parallel processes take different indices, and a bridge or namespace
left with a free index is a dead run's, removed before use.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

BRIDGE_HOST = 254
FIRST_INDEX, INDICES = 100, 100
LOCK_PATH = "/tmp/opentinker-netns-{index}.lock"


def claim_index(preferred: int | None = None) -> tuple[int, int]:
    """(a subnet index no other live run holds, the fd of its lock): `preferred` only when it is
    given (RuntimeError when it is taken), else the first free one from this pid's."""
    start = preferred if preferred is not None else FIRST_INDEX + os.getpid() % INDICES
    candidates = [start] if preferred is not None else \
        [FIRST_INDEX + (start - FIRST_INDEX + offset) % INDICES for offset in range(INDICES)]
    for index in candidates:
        fd = os.open(LOCK_PATH.format(index=index), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return index, fd
    raise RuntimeError(f"every subnet index in {candidates[0]}..{candidates[-1]} is held by another run")


def available() -> bool:
    """Whether namespaces and bridges can be made here (root, iproute2)."""
    if os.geteuid() != 0:
        return False
    probe = f"otprobe{os.getpid() % 10000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, check=False).returncode == 0
    if made:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return made


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


class HostNetwork:
    """Hosts by name, each in its own namespace with its own address (see the module's doc)."""

    def __init__(self, hosts: Sequence[str], *, subnet_index: int | None = None) -> None:
        if len(hosts) >= BRIDGE_HOST:
            raise ValueError(f"at most {BRIDGE_HOST - 1} hosts")
        self.index, self._lock = claim_index(subnet_index)
        self.hosts = list(hosts)
        self.bridge = f"otbr{self.index}"
        self.processes: list[subprocess.Popen] = []

    def namespace(self, host: str) -> str:
        return f"ot{self.index}-{self.hosts.index(host) + 1}"

    def address(self, host: str) -> str:
        return f"10.77.{self.index}.{self.hosts.index(host) + 1}"

    @property
    def gateway_address(self) -> str:
        """The root namespace's address on the hosts' network (where the test process is)."""
        return f"10.77.{self.index}.{BRIDGE_HOST}"

    @property
    def link_prefix(self) -> str:
        """The start of every host's link name in the root namespace (a capture there sees all
        traffic between hosts)."""
        return f"otv{self.index}h"

    def _peer(self, host: str) -> str:
        return f"otv{self.index}h{self.hosts.index(host) + 1}"

    def __enter__(self) -> HostNetwork:
        self._remove_links()  # leftovers of a dead run with the same index (its lock is free)
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for host in self.hosts:
                self._add_host(host)
        except BaseException:
            self.tear_down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.tear_down()

    def _add_host(self, host: str) -> None:
        namespace, peer = self.namespace(host), self._peer(host)
        _ip("netns", "add", namespace)
        _ip("link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", peer, "master", self.bridge)
        _ip("link", "set", peer, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("-n", namespace, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")

    def popen(self, host: str, command: Sequence[str], *, env: Mapping[str, str], log: Path) -> subprocess.Popen:
        """`command` as a process on `host` (its output appended to `log`)."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as sink:
            process = subprocess.Popen(["ip", "netns", "exec", self.namespace(host), *command], env=dict(env),
                                       stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        self.processes.append(process)
        return process

    def cut(self, host: str) -> None:
        """The host's link goes down: its processes run on, unreachable and reaching nothing."""
        _ip("link", "set", self._peer(host), "down")

    def restore(self, host: str) -> None:
        _ip("link", "set", self._peer(host), "up")

    def tear_down(self) -> None:
        """Stop every process started here, then remove the namespaces and the bridge."""
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, 15)
                except ProcessLookupError:
                    pass
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait(timeout=5)
        self.processes.clear()
        self._remove_links()
        if self._lock >= 0:
            os.close(self._lock)  # the index is free for the next run
            self._lock = -1

    def _remove_links(self) -> None:
        for index in range(1, len(self.hosts) + 1):
            subprocess.run(["ip", "netns", "del", f"ot{self.index}-{index}"], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
