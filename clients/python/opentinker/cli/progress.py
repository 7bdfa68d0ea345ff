"""A live view of a job for people: a progress bar with the phase and headline metrics, a metrics
table (latest, min, max and a sparkline per metric) and the job's log lines.

On a terminal the bar and the table are redrawn in place; elsewhere (a pipe, CI) one progress
line is printed per event and the table once, at the end.
"""

from __future__ import annotations

import sys
from typing import TextIO

from opentinker_api.common.v1 import progress_pb2
from opentinker_api.scheduler.v1 import job_pb2

SPARKS = "▁▂▃▄▅▆▇█"
HEADLINE = (("reward/mean", "reward"), ("accuracy", "acc"), ("eval/accuracy", "eval_acc"), ("loss", "loss"))
AGENT_HEADLINE = (("elo", "elo", ".0f"), ("match/win_rate", "win", ".2f"), ("match/invalid_move_rate", "invalid", ".2f"))
TABLE_METRICS = ("reward/mean", "accuracy", "eval/accuracy", "loss", "grad_norm", "response_tokens/mean",
                 "truncated", "env_errors", "tokens_per_second", "time/rollout_s", "time/update_s")
"""Shown in the live table when the job reports them, in this order (others: `jobs metrics`)."""


def sparkline(values: list[float], width: int = 24) -> str:
    values = values[-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARKS[int((v - low) / span * (len(SPARKS) - 1))] for v in values)


def bar(done: int, total: int, width: int = 24) -> str:
    filled = min(width, int(width * done / total)) if total else 0
    return "[" + "#" * filled + "." * (width - filled) + "]"


def metrics_table(series: dict[str, list[float]], names: tuple[str, ...] = TABLE_METRICS) -> list[str]:
    """Lines of `metric  latest  min  max  sparkline` for the metrics in `names` that have values."""
    shown = [name for name in names if series.get(name)]
    if not shown:
        return []
    width = max(len(name) for name in shown)
    lines = [f"{'metric':<{width}}  {'latest':>10}  {'min':>10}  {'max':>10}  curve"]
    for name in shown:
        values = series[name]
        lines.append(f"{name:<{width}}  {values[-1]:>10.4g}  {min(values):>10.4g}  {max(values):>10.4g}  "
                     f"{sparkline(values)}")
    return lines


class JobProgressView:
    """Feed it every JobEvent; it redraws the bar and table (or prints lines when not a TTY)."""

    def __init__(self, stream: TextIO | None = None, *, table: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.tty, self.table = self.stream.isatty(), table
        self.phase, self.step, self.total = "QUEUED", 0, 0
        self.latest: dict[str, float] = {}
        self.series: dict[str, list[float]] = {}
        """Each job-level metric's values in the order reported (one per report)."""
        self.agents: dict[str, dict[str, float]] = {}
        """Multi-agent jobs: each agent's latest metrics."""
        self.drawn_lines = 0

    @property
    def rewards(self) -> list[float]:
        return self.series.get("reward/mean", [])

    def on_event(self, event: job_pb2.JobEvent) -> None:
        kind = event.WhichOneof("payload")
        if kind == "progress":
            progress = event.progress.progress
            self.phase = progress_pb2.Phase.Name(progress.phase).removeprefix("PHASE_")
            self.step, self.total = progress.step, progress.total_steps
        elif kind == "metrics" and event.metrics.agent_id:
            self.agents.setdefault(event.metrics.agent_id, {}).update(event.metrics.values)
        elif kind == "metrics":
            self.latest.update(event.metrics.values)
            for name, value in event.metrics.values.items():
                self.series.setdefault(name, []).append(value)
        elif kind == "state_changed":
            self.phase = job_pb2.Job.State.Name(event.state_changed.to_state).removeprefix("STATE_")
        elif kind == "log":
            self._print_above(f"[{event.log.source}] {event.log.message}")
        self._draw()

    def _line(self) -> str:
        metrics = " ".join(f"{short}={self.latest[name]:.3f}" for name, short in HEADLINE if name in self.latest)
        for agent, values in self.agents.items():
            shown = " ".join(f"{short}={values[name]:{spec}}" for name, short, spec in AGENT_HEADLINE if name in values)
            metrics += f" | {agent} {shown}"
        return f"{bar(self.step, self.total)} step {self.step}/{self.total} {self.phase:<11} {metrics} {sparkline(self.rewards)}"

    def _block(self) -> list[str]:
        return [self._line(), *(metrics_table(self.series) if self.table else [])]

    def _draw(self) -> None:
        if not self.tty:
            self.stream.write(self._line() + "\n")
            self.stream.flush()
            return
        self._erase()
        block = self._block()
        self.stream.write("\n".join(block))
        self.stream.flush()
        self.drawn_lines = len(block)

    def _erase(self) -> None:
        """Move to the start of the drawn block and clear it (TTY only)."""
        if self.drawn_lines:
            self.stream.write("\r\x1b[2K" + "\x1b[1A\x1b[2K" * (self.drawn_lines - 1))

    def _print_above(self, text: str) -> None:
        if self.tty:
            self._erase()
            self.drawn_lines = 0
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.drawn_lines:
            self.stream.write("\n")
        elif not self.tty and self.table and self.series:
            self.stream.write("\n".join(metrics_table(self.series)) + "\n")
        self.stream.flush()
