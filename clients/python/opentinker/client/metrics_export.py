"""A job's metrics as rows, CSV, JSONL and PNG learning curves.

    events = scheduler.read_events(job_id)          # or every event seen by watch_job
    rows = metric_rows(events)                      # [{"step": 1, "agent": "", "reward/mean": 0.2, ...}]
    write_csv(rows, "metrics.csv"); write_jsonl(rows, "metrics.jsonl")
    plot_learning_curves(rows, "curves.png", metrics=["reward/mean", "eval/accuracy"])

One row per (agent, step): a step's metrics may arrive in several events (training, then eval);
they are merged. Single-agent jobs have agent "". matplotlib is only imported for PNGs.
"""

from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from opentinker_api.scheduler.v1 import job_pb2

Row = dict[str, float | int | str]
DEFAULT_CURVES = ("reward/mean", "eval/accuracy", "accuracy", "truncated", "loss")
"""The headline metrics: reward and success, and `truncated` (the share of episodes with a cut-off
reply: a policy drifting into replies that never end shows there first)."""


def metric_rows(events: Iterable[job_pb2.JobEvent]) -> list[Row]:
    """Metrics events merged per (agent, step), ordered by agent then step."""
    merged: dict[tuple[str, int], Row] = {}
    for event in events:
        if event.WhichOneof("payload") != "metrics":
            continue
        key = (event.metrics.agent_id, event.metrics.step)
        merged.setdefault(key, {"step": key[1], "agent": key[0]}).update(dict(event.metrics.values))
    return [merged[key] for key in sorted(merged)]


def metric_names(rows: Sequence[Row]) -> list[str]:
    names = {name for row in rows for name in row} - {"step", "agent"}
    return sorted(names)


def write_csv(rows: Sequence[Row], sink: TextIO | str | Path) -> None:
    """One column per metric (empty where a step lacks it)."""
    with _opened(sink) as stream:
        writer = csv.DictWriter(stream, fieldnames=["step", "agent", *metric_names(rows)], restval="")
        writer.writeheader()
        writer.writerows(rows)


def write_jsonl(rows: Sequence[Row], sink: TextIO | str | Path) -> None:
    with _opened(sink) as stream:
        for row in rows:
            stream.write(json.dumps(row) + "\n")


@contextlib.contextmanager
def _opened(sink: TextIO | str | Path) -> Iterator[TextIO]:
    if isinstance(sink, (str, Path)):
        with Path(sink).open("w", newline="") as stream:
            yield stream
    else:
        yield sink


def pick_curves(rows: Sequence[Row], wanted: Sequence[str] = ()) -> list[str]:
    """The metrics to plot: those asked for (that exist), else the usual headline ones present."""
    present = set(metric_names(rows))
    chosen = [name for name in (wanted or DEFAULT_CURVES) if name in present]
    return chosen or sorted(present)[:4]


def plot_learning_curves(rows: Sequence[Row], path: str | Path, *, metrics: Sequence[str] = (),
                         title: str = "") -> Path:
    """A PNG with one panel per metric, a line per agent, step on the x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = pick_curves(rows, metrics)
    if not names:
        raise ValueError("the job has reported no metrics yet: nothing to plot")
    figure, axes = plt.subplots(len(names), 1, figsize=(7, 2.6 * len(names)), squeeze=False, sharex=True)
    for axis, name in zip(axes[:, 0], names, strict=True):
        for agent in sorted({str(row["agent"]) for row in rows}):
            points = [(row["step"], row[name]) for row in rows if row["agent"] == agent and name in row]
            if points:
                axis.plot(*zip(*points, strict=True), marker="." if len(points) < 40 else None,
                          label=agent or None)
        axis.set_ylabel(name)
        axis.grid(alpha=0.3)
        if any(row["agent"] for row in rows):
            axis.legend(fontsize="small")
    axes[-1, 0].set_xlabel("step")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    target = Path(path)
    figure.savefig(target, dpi=100)
    plt.close(figure)
    return target
