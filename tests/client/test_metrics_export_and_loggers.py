"""Metric rows, CSV/JSONL/PNG export, and the optional W&B / TensorBoard loggers."""

from __future__ import annotations

import csv
import io
import json
import sys
import types

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import metrics_export
from opentinker.client.loggers import (
    SAMPLE_COLUMNS, MissingLoggerPackage, TensorBoardLogger, WandbLogger, agent_metrics_callback, fan_out,
    job_config, samples_callback,
)


def metrics(step: int, agent: str = "", **values: float) -> job_pb2.JobEvent:
    return job_pb2.JobEvent(metrics=job_pb2.MetricsReported(step=step, agent_id=agent, values=values))


EVENTS = [
    job_pb2.JobEvent(log=job_pb2.LogLine(message="hello")),
    metrics(1, **{"reward/mean": 0.1, "loss": 1.0}),
    metrics(1, **{"eval/accuracy": 0.25}),  # a second report for step 1 (eval) merges into its row
    metrics(2, **{"reward/mean": 0.3, "loss": 0.8}),
    metrics(1, "beta", elo=990.0),
    metrics(1, "alpha", elo=1010.0),
]


def test_rows_merge_a_steps_reports_and_keep_agents_apart():
    rows = metrics_export.metric_rows(EVENTS)
    assert rows[0] == {"step": 1, "agent": "", "reward/mean": pytest.approx(0.1), "loss": 1.0,
                              "eval/accuracy": 0.25}
    assert [(r["agent"], r["step"]) for r in rows] == [("", 1), ("", 2), ("alpha", 1), ("beta", 1)]


def test_csv_has_a_column_per_metric_and_blanks_where_a_step_lacks_one(tmp_path):
    rows = metrics_export.metric_rows(EVENTS)
    metrics_export.write_csv(rows, tmp_path / "m.csv")
    table = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert list(table[0]) == ["step", "agent", "elo", "eval/accuracy", "loss", "reward/mean"]
    assert table[1]["eval/accuracy"] == "" and table[1]["loss"] == "0.8"
    sink = io.StringIO()
    metrics_export.write_jsonl(rows, sink)
    assert [json.loads(line)["step"] for line in sink.getvalue().splitlines()] == [1, 2, 1, 1]


def test_learning_curves_are_a_png_with_the_asked_metrics(tmp_path):
    rows = metrics_export.metric_rows(EVENTS)
    assert metrics_export.pick_curves(rows) == ["reward/mean", "eval/accuracy", "loss"]
    assert metrics_export.pick_curves(rows, ["elo", "nope"]) == ["elo"]
    path = metrics_export.plot_learning_curves(rows, tmp_path / "c.png", metrics=["elo"])
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="no metrics"):
        metrics_export.plot_learning_curves([], tmp_path / "empty.png")


def test_without_the_packages_the_loggers_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import fails as if not installed
    with pytest.raises(MissingLoggerPackage, match="pip install wandb"):
        WandbLogger(project="p")
    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    with pytest.raises(MissingLoggerPackage, match="pip install tensorboard"):
        TensorBoardLogger("runs/tb")


def fake_tensorboard(monkeypatch, written: list) -> None:
    """tensorboard's event-file writer and protos as the logger uses them (modules stubbed)."""
    class Summary:
        def __init__(self, value): self.value = value  # noqa: E704
        class Value:  # noqa: E301
            def __init__(self, tag, simple_value): self.tag, self.simple_value = tag, simple_value  # noqa: E704

    class Event:
        def __init__(self, wall_time, step, summary): self.step, self.summary = step, summary  # noqa: E704

    class EventFileWriter:
        def __init__(self, log_dir): written.append(("open", log_dir))  # noqa: E704
        def add_event(self, event):  # noqa: E301
            written.append((event.step, {v.tag: v.simple_value for v in event.summary.value}))
        def flush(self): pass  # noqa: E301, E704
        def close(self): written.append("closed")  # noqa: E301, E704

    for name, attrs in {"tensorboard.summary.writer.event_file_writer": {"EventFileWriter": EventFileWriter},
                        "tensorboard.compat.proto.event_pb2": {"Event": Event},
                        "tensorboard.compat.proto.summary_pb2": {"Summary": Summary}}.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)


def test_the_tensorboard_logger_writes_each_steps_scalars_without_torch(monkeypatch):
    written: list = []
    fake_tensorboard(monkeypatch, written)
    monkeypatch.setitem(sys.modules, "torch", None)  # a client without torch
    with TensorBoardLogger("runs/tb") as tb:
        on_event = agent_metrics_callback(tb)
        for event in EVENTS:
            on_event(event)
    assert written[0] == ("open", "runs/tb") and written[-1] == "closed"
    assert written[1] == (1, {"reward/mean": pytest.approx(0.1), "loss": 1.0})
    assert (1, {"alpha/elo": 1010.0}) in written


def test_the_tensorboard_logger_writes_event_files_tensorboard_reads(tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    with TensorBoardLogger(str(tmp_path)) as tb:
        tb(1, {"reward/mean": 0.25})
        tb(2, {"reward/mean": 0.5})
    read = accumulator.EventAccumulator(str(tmp_path))
    read.Reload()
    assert [(e.step, e.value) for e in read.Scalars("reward/mean")] == [(1, 0.25), (2, 0.5)]


def test_a_wandb_run_gets_the_job_spec_as_config():
    spec = job_pb2.JobSpec(type=job_pb2.JOB_TYPE_RL, display_name="math-rl")
    spec.training.total_steps = 40
    config = job_config(spec)
    assert config["display_name"] == "math-rl" and config["training"]["total_steps"] == 40
    assert config["type"] == "JOB_TYPE_RL"


def test_wandb_logger_logs_each_step_and_agents_are_prefixed(monkeypatch):
    logged, finished = [], []
    run = types.SimpleNamespace(log=lambda values, step: logged.append((step, values)),
                                finish=lambda: finished.append(True))
    fake = types.ModuleType("wandb")
    fake.init = lambda **kwargs: run if kwargs == {"project": "p", "name": "job-1"} else None
    monkeypatch.setitem(sys.modules, "wandb", fake)
    seen = []
    with WandbLogger(project="p", name="job-1") as wandb_logger:
        on_event = agent_metrics_callback(fan_out(wandb_logger, lambda step, values: seen.append(step)))
        for event in EVENTS:
            on_event(event)
    assert logged[0] == (1, {"reward/mean": pytest.approx(0.1), "loss": 1.0})
    assert logged[-2:] == [(1, {"beta/elo": 990.0}), (1, {"alpha/elo": 1010.0})]
    assert seen == [1, 1, 2, 1, 1] and finished == [True]


def test_the_default_panels_show_the_truncated_share_where_a_job_reports_it():
    rows = [{"step": 1, "agent": "", "reward/mean": 0.1, "truncated": 0.5, "loss": 1.0, "grad_norm": 2.0}]
    assert metrics_export.pick_curves(rows) == ["reward/mean", "truncated", "loss"]


def samples_report() -> job_pb2.SamplesReported:
    report = job_pb2.SamplesReported(step=3, split="train")
    sample = report.samples.add(prompt="2+2=", reward=1.0, stop_reason=1, correct=True)
    sample.turns.add(action="4 | four", observation="right")
    report.samples.add(prompt="3+3=", reward=0.0, stop_reason=3).turns.add(action="7", truncated=True)
    return report


def test_the_tensorboard_logger_writes_samples_as_a_text_table_tensorboard_reads(tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    with TensorBoardLogger(str(tmp_path)) as tb:
        samples_callback([tb, lambda step, values: None])(job_pb2.JobEvent(samples=samples_report()))
    read = accumulator.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    read.Reload()
    [event] = read.Tensors("samples/train")
    text = event.tensor_proto.string_val[0].decode()
    assert event.step == 3 and text.splitlines()[0].startswith("| step | split |")
    assert "| 3 | train |  | 2+2= | 4 \\| four | 1.0 | DONE | True |" in text
    assert "| 3 | train |  | 3+3= | 7 | 0.0 | MAX_TURN_TOKENS | None |" in text


def test_wandb_logger_logs_samples_as_a_table_at_their_step(monkeypatch):
    logged = []
    run = types.SimpleNamespace(log=lambda values, step: logged.append((step, values)), finish=lambda: None)
    fake = types.ModuleType("wandb")
    fake.init = lambda **kwargs: run
    fake.Table = lambda columns, data: ("table", tuple(columns), [tuple(row) for row in data])
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with WandbLogger(project="p") as wandb_logger:
        samples_callback([wandb_logger])(job_pb2.JobEvent(samples=samples_report()))
        samples_callback([wandb_logger])(EVENTS[0])  # not samples: nothing logged
    [(step, values)] = logged
    kind, columns, rows = values["samples/train"]
    assert step == 3 and columns == SAMPLE_COLUMNS
    assert rows == [(3, "train", "", "2+2=", "4 | four", 1.0, "DONE", True),
                    (3, "train", "", "3+3=", "7", 0.0, "MAX_TURN_TOKENS", None)]
