"""Memory and file descriptors of a service (PSS of it and its children), sampled during
and after each load round, and the Prometheus metrics the loads read."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field


from harness.load.base import MiB


def _status_kib(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def children_by_parent() -> dict[int, list[int]]:
    """Every live process's children, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
    return children


def descendants(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """Every live descendant of `pid` (children, grandchildren, ...)."""
    children = children_by_parent() if children is None else children
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def _pss_bytes(pid: int) -> int:
    """Proportional set size: resident pages, each shared page divided among its sharers (forked
    game processes share most of their pages with their fork server)."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass(frozen=True, kw_only=True)
class ProcessSample:
    rss_bytes: int
    """VmRSS of the service's own process."""
    tree_pss_bytes: int
    """PSS of the process plus all its descendants (a service may run work in children): what
    "memory" means below."""
    children: int
    open_fds: int
    alive: bool = True


@dataclass(frozen=True)
class ProcessProbe:
    pid: int

    def sample(self, children: dict[int, list[int]] | None = None) -> ProcessSample:
        """Zeros and alive=False once the process is gone; `children`: a children_by_parent()
        already read."""
        try:
            fds = len(os.listdir(f"/proc/{self.pid}/fd"))
            rss, pss = _status_kib(self.pid, "VmRSS") * 1024, _pss_bytes(self.pid)
        except OSError:
            return ProcessSample(rss_bytes=0, tree_pss_bytes=0, children=0, open_fds=0, alive=False)
        kids = descendants(self.pid, children)
        for pid in kids:
            with contextlib.suppress(OSError):  # a child may exit meanwhile
                pss += _pss_bytes(pid)
        return ProcessSample(rss_bytes=rss, tree_pss_bytes=pss, children=len(kids), open_fds=fds)


@dataclass(kw_only=True)
class MemoryTrend:
    """End-of-round samples of one service, plus the highest memory seen at any sample."""

    name: str
    rounds: list[ProcessSample] = field(default_factory=list)
    peak_bytes: int = 0
    """Highest tree PSS sampled."""
    peak_rss_bytes: int = 0
    """Highest RSS of the service's own process sampled."""
    peak_children: int = 0

    def note(self, sample: ProcessSample, *, end_of_round: bool) -> None:
        self.peak_bytes = max(self.peak_bytes, sample.tree_pss_bytes)
        self.peak_rss_bytes = max(self.peak_rss_bytes, sample.rss_bytes)
        self.peak_children = max(self.peak_children, sample.children)
        if end_of_round:
            self.rounds.append(sample)

    @property
    def growth_bytes(self) -> int:
        """Highest end-of-round memory after the warm-up round minus the warm-up round's (0
        with fewer than two rounds)."""
        if len(self.rounds) < 2:
            return 0
        return max(s.tree_pss_bytes for s in self.rounds[1:]) - self.rounds[0].tree_pss_bytes

    @property
    def per_round_mib(self) -> list[float]:
        return [round(s.tree_pss_bytes / MiB, 1) for s in self.rounds]

    def flat(self, bound_bytes: int) -> bool:
        return self.growth_bytes < bound_bytes


@contextlib.asynccontextmanager
async def sampling(probes: dict[str, ProcessProbe], trends: dict[str, MemoryTrend], *,
                   interval_s: float = 0.1) -> AsyncIterator[None]:
    """Sample every probe about each `interval_s` while the body runs (peaks), then once more as
    the end of a round."""
    def sample_all() -> dict[str, ProcessSample]:
        children = children_by_parent()
        return {name: probe.sample(children) for name, probe in probes.items()}

    async def sample_forever() -> None:
        while True:
            started = time.monotonic()
            for name, sample in (await asyncio.to_thread(sample_all)).items():
                trends[name].note(sample, end_of_round=False)
            # reading hundreds of game processes' smaps costs CPU: keep it under ~1/5 of a core
            await asyncio.sleep(max(interval_s, 4 * (time.monotonic() - started)))

    sampler = asyncio.create_task(sample_forever())
    try:
        yield
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    for name, sample in sample_all().items():
        trends[name].note(sample, end_of_round=True)


# -- Prometheus metrics -----------------------------------------------------------------------

def scrape(metrics_url: str) -> str:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:  # noqa: S310 - loopback URL of the stack
        return response.read().decode()


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of every sample of `name` whose labels include `labels` (0 when there is none)."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


async def read_metric(metrics_url: str, name: str, **labels: str) -> float:
    return metric_sum(await asyncio.to_thread(scrape, metrics_url), name, **labels)


async def wait_for_metric(metrics_url: str, name: str, done: Callable[[float], bool], *, timeout_s: float = 15.0,
                          **labels: str) -> float:
    """Poll until `done(value)` (or the deadline: the caller judges the value); the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await read_metric(metrics_url, name, **labels)
        if done(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)
