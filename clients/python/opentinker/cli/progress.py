"""A live one-line view of a job for people: progress bar, phase, headline metrics, sparkline."""

from __future__ import annotations

import sys
from typing import TextIO

from opentinker.api.common.v1 import progress_pb2
from opentinker.api.scheduler.v1 import job_pb2

SPARKS = "▁▂▃▄▅▆▇█"
HEADLINE = (("reward/mean", "reward"), ("accuracy", "acc"), ("eval/accuracy", "eval_acc"), ("loss", "loss"))
AGENT_HEADLINE = (("elo", "elo", ".0f"), ("match/win_rate", "win", ".2f"), ("match/invalid_move_rate", "invalid", ".2f"))


def sparkline(values: list[float], width: int = 24) -> str:
    values = values[-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARKS[int((v - low) / span * (len(SPARKS) - 1))] for v in values)


def bar(done: int, total: int, width: int = 24) -> str:
    filled = int(width * done / total) if total else 0
    return "[" + "#" * filled + "." * (width - filled) + "]"


class JobProgressView:
    """Feed it every JobEvent; it redraws one status line (or prints lines when not a TTY)."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream, self.tty = stream, stream.isatty()
        self.phase, self.step, self.total = "QUEUED", 0, 0
        self.latest: dict[str, float] = {}
        self.rewards: list[float] = []
        self.agents: dict[str, dict[str, float]] = {}
        """Multi-agent jobs: each agent's latest metrics."""

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
            if "reward/mean" in event.metrics.values:
                self.rewards.append(event.metrics.values["reward/mean"])
        elif kind == "state_changed":
            self.phase = job_pb2.Job.State.Name(event.state_changed.to_state).removeprefix("STATE_")
        elif kind == "log":
            self._print_line(f"[{event.log.source}] {event.log.message}")
        self._draw()

    def _line(self) -> str:
        metrics = " ".join(f"{short}={self.latest[name]:.3f}" for name, short in HEADLINE if name in self.latest)
        for agent, values in self.agents.items():
            shown = " ".join(f"{short}={values[name]:{spec}}" for name, short, spec in AGENT_HEADLINE if name in values)
            metrics += f" | {agent} {shown}"
        return f"{bar(self.step, self.total)} step {self.step}/{self.total} {self.phase:<11} {metrics} {sparkline(self.rewards)}"

    def _draw(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + self._line())
            self.stream.flush()
        else:
            self._print_line(self._line())

    def _print_line(self, text: str) -> None:
        prefix = "\r\x1b[2K" if self.tty else ""
        self.stream.write(prefix + text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
