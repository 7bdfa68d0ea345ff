"""A job's metric history from its events: one series of (step, value) per metric name.

Metrics of a multi-agent job's agent are named "<agent_id>/<metric>". A step reported twice
(a re-queued attempt repeats steps after its checkpoint) keeps the latest value.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.dashboard.views import finite


def series_name(agent_id: str, metric: str) -> str:
    return f"{agent_id}/{metric}" if agent_id else metric


def metric_series(events: Iterable[job_pb2.JobEvent]) -> dict[str, list[list[float | None]]]:
    """{metric name: [[step, value], ...] ordered by step}."""
    by_name: dict[str, dict[int, float | None]] = {}
    for event in events:
        if event.WhichOneof("payload") != "metrics":
            continue
        for metric, value in event.metrics.values.items():
            name = series_name(event.metrics.agent_id, metric)
            by_name.setdefault(name, {})[event.metrics.step] = finite(value)
    return {name: [[step, points[step]] for step in sorted(points)] for name, points in sorted(by_name.items())}
