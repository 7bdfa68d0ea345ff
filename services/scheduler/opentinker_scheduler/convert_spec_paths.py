"""The file paths and checkpoint ids a JobSpec names, with their field paths (protobuf -> domain)."""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf import json_format

from opentinker_api.common.v1 import environment_pb2, model_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.auth.tenant_paths import config_path_entries
from opentinker_scheduler.model import PathField

OUTPUT, DATASET, MODEL, CONFIG = "output", "dataset", "model", "config"


def path_fields(spec: job_pb2.JobSpec) -> Iterator[PathField]:
    if spec.inference.output_path:
        yield PathField(path="spec.inference.output_path", kind=OUTPUT, value=spec.inference.output_path)
    if spec.dataset.path:
        yield PathField(path="spec.dataset.path", kind=DATASET, value=spec.dataset.path)
    for field, model in models(spec):
        for name in ("path", "tokenizer_path"):
            if value := getattr(model.local, name):
                yield PathField(path=f"{field}.local.{name}", kind=MODEL, value=value)
    for field, environment in environments(spec):
        yield from config_paths(environment, f"{field}.config")


def checkpoint_refs(spec: job_pb2.JobSpec) -> Iterator[tuple[str, str]]:
    for field, model in models(spec):
        if model.WhichOneof("source") == "checkpoint":
            yield f"{field}.checkpoint.checkpoint_id", model.checkpoint.checkpoint_id


def models(spec: job_pb2.JobSpec) -> Iterator[tuple[str, model_pb2.ModelReference]]:
    if spec.HasField("policy"):
        yield "spec.policy.model", spec.policy.model
    for index, agent in enumerate(spec.agents):
        yield f"spec.agents[{index}].model", agent.model


def environments(spec: job_pb2.JobSpec) -> Iterator[tuple[str, environment_pb2.EnvironmentReference]]:
    yield "spec.environment", spec.environment
    yield "spec.multi_agent.eval_environment", spec.multi_agent.eval_environment


def config_paths(environment: environment_pb2.EnvironmentReference, field: str) -> Iterator[PathField]:
    if not environment.HasField("config"):
        return
    config = json_format.MessageToDict(environment.config)
    for name, container, key in config_path_entries(config, field):
        yield PathField(path=name, kind=CONFIG, value=container[key])
