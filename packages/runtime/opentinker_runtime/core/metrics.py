"""Prometheus metrics of one process: its registry and the helpers that define metrics on it.

Every OpenTinker process has one `REGISTRY` (not prometheus_client's global one, so libraries
that register on the global registry never leak into our exposition). A service defines its
metrics once, at import, in its own `metrics.py` module, named `opentinker_<service>_...`:

    EPISODES = counter("opentinker_rollout_episodes", "Episodes finished.", ("termination",))
    EPISODES.labels(termination="done").inc()

and updates them where the work happens (domain code may import this module: it never imports
grpc). `opentinker_runtime.core.metrics_http` serves `exposition()` on `/metrics`;
`opentinker_runtime.core.metrics_interceptor` counts every RPC.

Defining the same name twice returns the first metric (a module imported under two names, a
test reloading one) as long as its type and labels agree; a clash raises ValueError.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

disable_created_metrics()  # no `<name>_created` series beside every counter and histogram
REGISTRY = CollectorRegistry()
"""The registry every OpenTinker metric of this process is defined on."""
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
PlatformCollector(registry=REGISTRY)  # python_info
GCCollector(registry=REGISTRY)  # python_gc_*

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The Content-Type of `exposition()`: the Prometheus text format 0.0.4, which every Prometheus
version reads (our names need none of format 1.0.0's UTF-8 escaping)."""

FAST_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Buckets for calls that usually take milliseconds (RPCs, environment steps, one generation)."""
SLOW_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Buckets for work that takes seconds to minutes (training calls, RL phases)."""

M = TypeVar("M", Counter, Gauge, Histogram)
_defined: dict[str, Any] = {}
_defined_lock = threading.Lock()


def counter(name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
    """A counter; `name` without `_total` (the exposition adds it)."""
    return _define(Counter, name, documentation, labels)


def gauge(name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
    """A gauge (multiprocess mode is not used: one process, one registry)."""
    return _define(Gauge, name, documentation, labels)


def histogram(name: str, documentation: str, labels: Sequence[str] = (), *,
              buckets: Sequence[float] = FAST_SECONDS) -> Histogram:
    """A histogram, seconds unless the name says otherwise; +Inf is added to `buckets`."""
    return _define(Histogram, name, documentation, labels, buckets=tuple(buckets))


def _define(kind: type[M], name: str, documentation: str, labels: Sequence[str], **options: Any) -> M:
    with _defined_lock:
        existing = _defined.get(name)
        if existing is not None:
            _check_same(existing, kind, name, labels)
            return existing
        metric = kind(name, documentation, labelnames=tuple(labels), registry=REGISTRY, **options)
        _defined[name] = metric
        return metric


def _check_same(existing: Any, kind: type, name: str, labels: Sequence[str]) -> None:
    if type(existing) is not kind or tuple(existing._labelnames) != tuple(labels):  # noqa: SLF001
        raise ValueError(f"metric {name!r} is already defined as a {type(existing).__name__} with "
                         f"labels {existing._labelnames}; cannot redefine it as a {kind.__name__} "  # noqa: SLF001
                         f"with labels {tuple(labels)}")


def register_collector(collector: Collector) -> None:
    """Add a custom collector (values read at scrape time, e.g. from Redis)."""
    REGISTRY.register(collector)


def unregister_collector(collector: Collector) -> None:
    """Remove a collector added with `register_collector`; unknown ones are ignored."""
    try:
        REGISTRY.unregister(collector)
    except KeyError:
        pass


def exposition() -> bytes:
    """Every metric of this process in the Prometheus text format."""
    return generate_latest(REGISTRY)
