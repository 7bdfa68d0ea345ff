"""The Coordinator resolves a job's relative paths inside its tenant's area, symlinks followed, and
answers "outside", "missing" and "not readable" with one message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opentinker_api.common.v1 import environment_pb2, model_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.auth.tenant_paths import PathRefused, TenantAreas
from opentinker_runtime.jobplan import JobPlan, resolve_job_plan
from opentinker_coordinator.adapters.job_paths import confine_plan_paths
from tests.jobplan.specs import least_spec


@pytest.fixture
def server(tmp_path: Path) -> dict[str, Path]:
    """A tenant root with acme's and globex's areas, a shared model directory and server files outside."""
    root, shared, secret = tmp_path / "tenants", tmp_path / "shared-models", tmp_path / "server"
    for folder in (root / "acme" / "datasets", root / "acme" / "models" / "mine", root / "globex" / "models" / "theirs",
                   shared / "qwen", secret / "checkpoints" / "ckpt-globex" / "model"):
        folder.mkdir(parents=True)
    (root / "acme" / "datasets" / "chats.jsonl").write_text("{}\n")
    (secret / "redis.aof").write_text("secret\n")
    return {"root": root, "shared": shared, "secret": secret}


def areas(server: dict[str, Path]) -> TenantAreas:
    return TenantAreas(root=server["root"], shared_model_dir=server["shared"])


def plan_of(spec: job_pb2.JobSpec) -> JobPlan:
    return resolve_job_plan(spec, job_id="job-1")


def inference(output_path: str) -> JobPlan:
    return plan_of(least_spec("INFERENCE", **{"inference.output_path": output_path}))


def dataset(path: str) -> JobPlan:
    return plan_of(least_spec("SFT", **{"dataset.path": path}))


def local_model(path: str, tokenizer_path: str = "") -> JobPlan:
    spec = least_spec("RL")
    spec.policy.model.CopyFrom(model_pb2.ModelReference(local=model_pb2.LocalModel(path=path,
                                                                                   tokenizer_path=tokenizer_path)))
    return plan_of(spec)


def game(config: dict, **where: str) -> JobPlan:
    spec = least_spec("RL")
    spec.environment.CopyFrom(environment_pb2.EnvironmentReference(env_name="math", **where))
    spec.environment.config.update(config)
    return plan_of(spec)


def confine(server: dict[str, Path], plan: JobPlan) -> JobPlan:
    return confine_plan_paths(plan, "acme", areas(server))


def refusal(server: dict[str, Path], plan: JobPlan) -> str:
    with pytest.raises(PathRefused) as refused:
        confine(server, plan)
    return str(refused.value)


def test_outputs_datasets_and_models_resolve_inside_the_tenants_area(server: dict[str, Path]) -> None:
    acme = server["root"] / "acme"
    output = confine(server, inference("evals/run-1.jsonl")).inference.output_path
    assert output == str(acme / "outputs" / "evals" / "run-1.jsonl") and (acme / "outputs" / "evals").is_dir()
    assert confine(server, dataset("chats.jsonl")).dataset.path == str(acme / "datasets" / "chats.jsonl")
    model = confine(server, local_model("mine", str(server["shared"] / "qwen"))).policy.model
    assert (model.path, model.tokenizer_path) == (str(acme / "models" / "mine"), str(server["shared"] / "qwen"))
    played = confine(server, game({"dataset_path": "chats.jsonl", "eval_size": 3})).environment
    assert dict(played.config) == {"dataset_path": str(acme / "datasets" / "chats.jsonl"), "eval_size": 3}


def test_symlinks_planted_in_the_area_cannot_lead_out(server: dict[str, Path]) -> None:
    acme = server["root"] / "acme"
    (acme / "outputs").mkdir()
    os.symlink(server["secret"], acme / "outputs" / "escape")
    os.symlink(server["secret"] / "redis.aof", acme / "outputs" / "aof.jsonl")
    os.symlink(server["secret"] / "redis.aof", acme / "datasets" / "aof.jsonl")
    os.symlink(server["secret"] / "checkpoints" / "ckpt-globex", acme / "models" / "stolen")
    os.symlink(server["root"] / "globex" / "models" / "theirs", acme / "models" / "neighbour")
    for output in ("escape/redis.aof", "escape/new/file.jsonl", "aof.jsonl"):
        assert "cannot write there" in refusal(server, inference(output))
    assert (server["secret"] / "redis.aof").read_text() == "secret\n" and not (server["secret"] / "new").exists()
    assert refusal(server, dataset("aof.jsonl")) == (
        "spec.dataset.path: no such file in your tenant area (datasets/)")
    for model in ("stolen", "stolen/model", "neighbour"):
        assert refusal(server, local_model(model)).startswith("spec.policy.model.local.path: no such model directory")
    os.symlink(server["secret"] / "checkpoints", server["shared"] / "leak")
    assert refusal(server, local_model(str(server["shared"] / "leak" / "ckpt-globex"))).startswith(
        "spec.policy.model.local.path: no such model directory")


def test_what_exists_outside_and_what_does_not_get_the_same_answer(server: dict[str, Path]) -> None:
    acme = server["root"] / "acme"
    os.symlink(server["secret"] / "redis.aof", acme / "datasets" / "exists.jsonl")
    os.symlink(server["secret"] / "missing.aof", acme / "datasets" / "missing.jsonl")
    datasets = {refusal(server, dataset(path))
                for path in ("exists.jsonl", "missing.jsonl", "nothing-here.jsonl", ".", "../acme/datasets/chats.jsonl")}
    configs = {refusal(server, game({"dataset_path": path}))
               for path in ("exists.jsonl", "missing.jsonl", "nothing-here.jsonl", "../../server/redis.aof")}
    models = {refusal(server, local_model(path)) for path in ("../globex/models/theirs", "nothing", "mine/../../globex")}
    assert datasets == {"spec.dataset.path: no such file in your tenant area (datasets/)"}
    assert configs == {"spec.environment.config['dataset_path']: no such file in your tenant area (datasets/)"}
    assert models == {"spec.policy.model.local.path: no such model directory in your tenant area (models/) or the "
                      "shared model directory"}


def test_absolute_paths_only_an_admin_could_submit_are_left_alone(server: dict[str, Path]) -> None:
    """The Scheduler refuses absolute paths from tenant keys; an operator's stay as they are."""
    for admin_plan in (inference("/tmp/eval.jsonl"), dataset("/data/chats.jsonl"), local_model("/models/qwen"),
                       game({"dataset_path": "/data/problems.jsonl"})):
        assert confine(server, admin_plan) == admin_plan


def test_a_named_envhost_gets_paths_in_the_tenant_area_and_only_a_raw_address_is_left_alone(
        server: dict[str, Path]) -> None:
    """A named EnvHost may be the stack's own (named by its worker id): its games read the tenant's area.
    A raw envhost_address is admin-only (the Scheduler refuses it from tenant keys)."""
    named = confine(server, game({"dataset_path": "chats.jsonl"}, envhost="envhost@127.0.0.1:50054"))
    assert named.environment.config["dataset_path"] == str(server["root"] / "acme" / "datasets" / "chats.jsonl")
    assert refusal(server, game({"dataset_path": ".opentinker/admin.key"}, envhost="envhost@127.0.0.1:50054")) == (
        "spec.environment.config['dataset_path']: no such file in your tenant area (datasets/)")
    resolved = game({"dataset_path": "../x"}, envhost="my-laptop", envhost_address="10.0.0.5:50054")
    assert "no such file" in refusal(server, resolved)
    raw = game({"dataset_path": "local/problems.jsonl"}, envhost_address="10.0.0.5:50054")
    assert confine(server, raw) == raw
