"""Send a job's metrics to Weights & Biases or TensorBoard while you watch it (when installed).

    with WandbLogger(project="opentinker", name=job_id) as wandb_log, TensorBoardLogger("runs/tb") as tb:
        ServiceClient(url).follow(job_id, on_metrics=fan_out(wandb_log, tb))

Neither package is a dependency: constructing a logger without it raises MissingLoggerPackage
naming what to install (`opentinker run` builds its loggers before it submits). The
TensorBoard logger writes event files with tensorboard's own writer: no torch on the client. A
multi-agent job's metrics are logged under "<agent>/<name>" when passed through
`agent_metrics_callback`; `job_config` turns a job's spec into a W&B run's config. Samples (a
few episodes of each step) go to a W&B table or TensorBoard's Text tab through `samples_callback`.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from opentinker_api.common.v1 import trajectory_pb2
from opentinker_api.scheduler.v1 import job_pb2

MetricsCallback = Callable[[int, dict[str, float]], None]


class MissingLoggerPackage(ImportError):
    """The logger's package is not installed."""


TENSORBOARD_WRITER = "tensorboard.summary.writer.event_file_writer"


def job_config(spec: job_pb2.JobSpec) -> dict[str, Any]:
    """A job's spec as a W&B run's config: its hyperparameters, as the spec names them (64-bit
    integers as numbers, not the JSON mapping's strings)."""
    return _int64_as_numbers(json_format.MessageToDict(spec, preserving_proto_field_name=True), spec.DESCRIPTOR)


_INT64 = {FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64}


def _int64_as_numbers(data: dict[str, Any], message: Descriptor) -> dict[str, Any]:
    for name, value in data.items():
        field = message.fields_by_name.get(name)
        if field is None:
            continue
        if field.cpp_type in _INT64:
            data[name] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif field.message_type is not None:
            for item, kind in _nested(field, value):
                _int64_as_numbers(item, kind)
    return data


def _nested(field: FieldDescriptor, value: Any) -> list[tuple[dict[str, Any], Descriptor]]:
    """The messages of our own API inside a field's JSON value (one, a list, a map's values)."""
    kind = field.message_type
    if kind.GetOptions().map_entry:
        kind, items = kind.fields_by_name["value"].message_type, list(value.values())
    else:
        items = value if isinstance(value, list) else [value]
    if kind is None or not kind.full_name.startswith("opentinker."):
        return []  # scalars, or a well-known type (a Struct's JSON is already plain)
    return [(item, kind) for item in items if isinstance(item, dict)]


def require_packages(*, wandb: bool = False, tensorboard: bool = False) -> None:
    """MissingLoggerPackage unless the packages of the loggers asked for are installed (nothing
    is started: a W&B run begins only when a WandbLogger is built)."""
    if wandb:
        _import("wandb", "wandb")
    if tensorboard:
        _import(TENSORBOARD_WRITER, "tensorboard")


def _import(module: str, install: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingLoggerPackage(f"{module} is not installed: pip install {install}") from error


class WandbLogger:
    """Logs each step's metrics to a W&B run (wandb.init(**init_kwargs))."""

    def __init__(self, **init_kwargs: object) -> None:
        wandb = _import("wandb", "wandb")
        self.run = wandb.init(**init_kwargs)

    def name_run(self, name: str) -> None:
        """Name a run started before its job had an id (a spec without a display name)."""
        if getattr(self.run, "name", None) != name:
            self.run.name = name

    def __call__(self, step: int, values: dict[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def log_samples(self, report: job_pb2.SamplesReported) -> None:
        """The episodes as a W&B table "samples/<split>" at their step."""
        wandb = _import("wandb", "wandb")
        table = wandb.Table(columns=list(SAMPLE_COLUMNS), data=sample_rows(report))
        self.run.log({_samples_key(report): table}, step=report.step)

    def close(self) -> None:
        self.run.finish()

    def __enter__(self) -> WandbLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TensorBoardLogger:
    """Writes each step's metrics as scalars to a TensorBoard log directory (tensorboard's own
    event-file writer: no torch needed)."""

    def __init__(self, log_dir: str) -> None:
        writer = _import(TENSORBOARD_WRITER, "tensorboard")
        self._event = _import("tensorboard.compat.proto.event_pb2", "tensorboard").Event
        self._summary = _import("tensorboard.compat.proto.summary_pb2", "tensorboard").Summary
        self.writer = writer.EventFileWriter(str(log_dir))

    def __call__(self, step: int, values: dict[str, float]) -> None:
        scalars = [self._summary.Value(tag=name, simple_value=float(value)) for name, value in values.items()]
        self.writer.add_event(self._event(wall_time=time.time(), step=step, summary=self._summary(value=scalars)))
        self.writer.flush()

    def log_samples(self, report: job_pb2.SamplesReported) -> None:
        """The episodes as a markdown table in TensorBoard's Text tab ("samples/<split>")."""
        tensor_pb2 = _import("tensorboard.compat.proto.tensor_pb2", "tensorboard")
        types_pb2 = _import("tensorboard.compat.proto.types_pb2", "tensorboard")
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[samples_markdown(report).encode()])
        metadata_type = _import("tensorboard.compat.proto.summary_pb2", "tensorboard").SummaryMetadata
        metadata = metadata_type(plugin_data=metadata_type.PluginData(plugin_name="text"))
        value = self._summary.Value(tag=_samples_key(report), tensor=tensor, metadata=metadata)
        self.writer.add_event(self._event(wall_time=time.time(), step=report.step, summary=self._summary(value=[value])))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> TensorBoardLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fan_out(*callbacks: MetricsCallback) -> MetricsCallback:
    """One on_metrics callback that calls each of `callbacks` in turn."""

    def call_all(step: int, values: dict[str, float]) -> None:
        for callback in callbacks:
            callback(step, values)

    return call_all


def agent_metrics_callback(callback: MetricsCallback) -> Callable[[job_pb2.JobEvent], None]:
    """An on_event callback passing metrics to `callback`, an agent's names prefixed "<agent>/"."""

    def on_event(event: job_pb2.JobEvent) -> None:
        if event.WhichOneof("payload") != "metrics":
            return
        prefix = f"{event.metrics.agent_id}/" if event.metrics.agent_id else ""
        callback(event.metrics.step, {prefix + name: value for name, value in event.metrics.values.items()})

    return on_event


SAMPLE_COLUMNS = ("step", "split", "agent", "prompt", "reply", "reward", "stop_reason", "correct")


def sample_rows(report: job_pb2.SamplesReported) -> list[list[Any]]:
    """One row per episode (SAMPLE_COLUMNS); the reply is every turn's action, in order."""
    return [[report.step, report.split, report.agent_id, sample.prompt,
             "\n".join(turn.action for turn in sample.turns), sample.reward,
             trajectory_pb2.StopReason.Name(sample.stop_reason).removeprefix("STOP_REASON_"),
             sample.correct if sample.HasField("correct") else None] for sample in report.samples]


def samples_markdown(report: job_pb2.SamplesReported) -> str:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", "<br>")
    lines = ["| " + " | ".join(SAMPLE_COLUMNS) + " |", "|" + "---|" * len(SAMPLE_COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in sample_rows(report)])


def _samples_key(report: job_pb2.SamplesReported) -> str:
    return f"{report.agent_id}/samples/{report.split}" if report.agent_id else f"samples/{report.split}"


def samples_callback(loggers: list) -> Callable[[job_pb2.JobEvent], None]:
    """An on_event callback passing each SamplesReported event to every logger that logs samples."""

    def on_event(event: job_pb2.JobEvent) -> None:
        if event.WhichOneof("payload") == "samples":
            for logger in loggers:
                if hasattr(logger, "log_samples"):
                    logger.log_samples(event.samples)

    return on_event
