"""Send a job's metrics to Weights & Biases or TensorBoard while you watch it (when installed).

    with WandbLogger(project="opentinker", name=job_id) as wandb_log, TensorBoardLogger("runs/tb") as tb:
        ServiceClient(url).follow(job_id, on_metrics=fan_out(wandb_log, tb))

Neither package is a dependency: constructing a logger without it raises MissingLoggerPackage
naming what to install. A multi-agent job's metrics are logged under "<agent>/<name>" when
passed through `agent_metrics_callback`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from opentinker.api.scheduler.v1 import job_pb2

MetricsCallback = Callable[[int, dict[str, float]], None]


class MissingLoggerPackage(ImportError):
    """The logger's package is not installed."""


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

    def __call__(self, step: int, values: dict[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def close(self) -> None:
        self.run.finish()

    def __enter__(self) -> WandbLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TensorBoardLogger:
    """Writes each metric as a scalar to a TensorBoard log directory."""

    def __init__(self, log_dir: str) -> None:
        module = _import("torch.utils.tensorboard", "tensorboard")
        self.writer = module.SummaryWriter(log_dir=log_dir)

    def __call__(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, global_step=step)
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
