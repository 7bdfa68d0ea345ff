"""A job's file paths resolved inside its tenant's area before anything opens them.

The Scheduler lets only admin keys name absolute paths (or, for models, paths in the shared model
directory); every relative path is resolved here, with symlinks followed, inside the job's tenant
area (`opentinker_runtime.auth.tenant_paths`), and the job the drivers see carries the resolved paths:
the INFERENCE output, the SFT dataset, local models (sent on to Trainer and Rollout) and the path
entries of game configs. Paths that lead out of the area, do
not exist or cannot be read all fail the run with the same message.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf import json_format

from opentinker_api.common.v1 import environment_pb2, model_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.auth.tenant_paths import TenantAreas, config_path_entries


def confine_job_paths(job: job_pb2.Job, areas: TenantAreas) -> job_pb2.Job:
    """A copy of `job` whose relative paths are absolute paths inside its tenant's area; PathRefused
    (a ValueError naming the field) for a path that leads out, is missing or cannot be read."""
    confined = job_pb2.Job()
    confined.CopyFrom(job)
    spec, tenant = confined.spec, job.tenant_id
    if spec.type == job_pb2.JOB_TYPE_INFERENCE and not spec.inference.output_path:
        spec.inference.output_path = f"{job.job_id}.jsonl"  # beside the tenant's other outputs, listed as an artifact
    if spec.inference.output_path and not spec.inference.output_path.startswith("/"):
        spec.inference.output_path = str(areas.output(tenant, spec.inference.output_path,
                                                      "spec.inference.output_path"))
    if spec.dataset.path and not spec.dataset.path.startswith("/"):
        spec.dataset.path = str(areas.dataset(tenant, spec.dataset.path, "spec.dataset.path"))
    for field, model in _models(spec):
        _confine_local_model(model.local, areas, tenant, f"{field}.local")
    for field, environment in (("spec.environment", spec.environment),
                               ("spec.multi_agent.eval_environment", spec.multi_agent.eval_environment)):
        _confine_game_config(environment, areas, tenant, f"{field}.config")
    return confined


def _models(spec: job_pb2.JobSpec) -> Iterator[tuple[str, model_pb2.ModelReference]]:
    if spec.HasField("policy"):
        yield "spec.policy.model", spec.policy.model
    for index, agent in enumerate(spec.agents):
        yield f"spec.agents[{index}].model", agent.model


def _confine_local_model(local: model_pb2.LocalModel, areas: TenantAreas, tenant: str, field: str) -> None:
    for name in ("path", "tokenizer_path"):
        path = getattr(local, name)
        if path and (not path.startswith("/") or areas.in_shared_model_dir(path)):
            setattr(local, name, str(areas.model(tenant, path, f"{field}.{name}")))


def _confine_game_config(environment: environment_pb2.EnvironmentReference, areas: TenantAreas, tenant: str,
                         field: str) -> None:
    """Path entries of a game config name files in the tenant's datasets/, whichever EnvHost plays it (a
    named one may be the stack's own, or an operator's sharing the stack's files). Only a raw
    envhost_address, an admin-only field, keeps its config as it is."""
    if (environment.envhost_address and not environment.envhost) or not environment.HasField("config"):
        return
    config = json_format.MessageToDict(environment.config)
    entries = [entry for entry in config_path_entries(config, field) if not entry[1][entry[2]].startswith("/")]
    for name, container, key in entries:
        container[key] = str(areas.dataset(tenant, container[key], name))
    if entries:
        environment.config.Clear()
        environment.config.update(config)
