"""What the Scheduler checks of a submitted spec against its own state and the caller, read from
the spec's resolved plan (opentinker_runtime.jobplan, which checked every rule of the spec itself):
the file paths it names, the checkpoints, the EnvHosts and environments, and its devices."""

from __future__ import annotations

from collections.abc import Iterator

from opentinker_runtime.auth.tenant_paths import config_path_entries
from opentinker_runtime.jobplan.plan import AdaptationKind, EnvironmentPlan, JobPlan
from opentinker_runtime.ml.sources import ModelKind
from opentinker_scheduler.model import (
    DeviceKind,
    EnvHostField,
    EnvironmentFacts,
    JobSpecFacts,
    PathField,
    ResourceRequest,
    Role,
)

OUTPUT, DATASET, MODEL, CONFIG = "output", "dataset", "model", "config"


def spec_facts(plan: JobPlan, envhost_fields: tuple[EnvHostField, ...]) -> JobSpecFacts:
    """`envhost_fields`: read from the spec itself (the caller's right to them is judged first)."""
    return JobSpecFacts(plan=plan, envhost_fields=envhost_fields, path_fields=tuple(path_fields(plan)),
                        checkpoint_refs=tuple(checkpoint_refs(plan)), environments=tuple(environment_facts(plan)),
                        resources=resource_requests(plan))


def path_fields(plan: JobPlan) -> Iterator[PathField]:
    """Every file path the spec names (an INFERENCE job's default output file is no path of the spec's)."""
    if plan.inference is not None and plan.inference.output_path:
        yield PathField(path="spec.inference.output_path", kind=OUTPUT, value=plan.inference.output_path)
    if plan.dataset is not None and plan.dataset.path:
        yield PathField(path="spec.dataset.path", kind=DATASET, value=plan.dataset.path)
    for policy in plan.policies:
        if policy.model.kind == ModelKind.LOCAL:
            for name in ("path", "tokenizer_path"):
                if value := getattr(policy.model, name):
                    yield PathField(path=f"{policy.path}.model.local.{name}", kind=MODEL, value=value)
    for environment in plan.environments:
        yield from config_paths(environment)


def config_paths(environment: EnvironmentPlan) -> Iterator[PathField]:
    for name, container, key in config_path_entries(environment.config, f"{environment.path}.config"):
        yield PathField(path=name, kind=CONFIG, value=container[key])


def checkpoint_refs(plan: JobPlan) -> Iterator[tuple[str, str]]:
    """(field path, checkpoint id) of every policy whose model is a checkpoint."""
    for policy in plan.policies:
        if policy.model.kind == ModelKind.CHECKPOINT:
            yield f"{policy.path}.model.checkpoint.checkpoint_id", policy.model.name


def environment_facts(plan: JobPlan) -> Iterator[EnvironmentFacts]:
    for environment in plan.environments:
        yield EnvironmentFacts(path=environment.path, env_name=environment.env_name, envhost=environment.envhost,
                               envhost_address=environment.envhost_address)


def resource_requests(plan: JobPlan) -> tuple[ResourceRequest, ...]:
    """The devices the job asks for (the job type's default when the spec names none); a LoRA
    job's request of one device, unless dedicated, is `shared` (a share of a device), placed
    where one of its policies' bases (`model_keys`) is resident when one is."""
    lora = bool(plan.policies) and all(p.adaptation.kind is AdaptationKind.LORA for p in plan.policies)
    keys = tuple(dict.fromkeys(p.model.model_key for p in plan.policies))
    requests = []
    for request in plan.resources:
        shared = lora and request.device_count == 1 and not request.dedicated
        requests.append(ResourceRequest(role=Role(request.role), device_count=request.device_count,
                                        device_kind=DeviceKind(request.device_kind),
                                        min_memory_bytes=request.min_memory_bytes, shared=shared,
                                        model_keys=keys if shared else ()))
    return tuple(requests)
