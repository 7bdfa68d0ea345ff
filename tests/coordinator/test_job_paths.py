"""The Coordinator resolves a job's relative paths inside its tenant's area, symlinks followed, and
answers "outside", "missing" and "not readable" with one message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opentinker_api.common.v1 import environment_pb2, model_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.auth.tenant_paths import PathRefused, TenantAreas
from opentinker_coordinator.adapters.job_paths import confine_job_paths


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


def job(tenant: str = "acme", **spec_fields: object) -> job_pb2.Job:
    return job_pb2.Job(job_id="job-1", tenant_id=tenant, spec=job_pb2.JobSpec(**spec_fields))


def inference(output_path: str) -> job_pb2.Job:
    return job(type=job_pb2.JOB_TYPE_INFERENCE, inference=job_pb2.InferenceConfig(output_path=output_path))


def local_model(path: str, tokenizer_path: str = "") -> job_pb2.Job:
    return job(policy=job_pb2.AgentSpec(model=model_pb2.ModelReference(
        local=model_pb2.LocalModel(path=path, tokenizer_path=tokenizer_path))))


def game(config: dict, **where: str) -> job_pb2.Job:
    environment = environment_pb2.EnvironmentReference(env_name="math", **where)
    environment.config.update(config)
    return job(environment=environment)


def refusal(server: dict[str, Path], confined: job_pb2.Job) -> str:
    with pytest.raises(PathRefused) as refused:
        confine_job_paths(confined, areas(server))
    return str(refused.value)


def test_outputs_datasets_and_models_resolve_inside_the_tenants_area(server: dict[str, Path]) -> None:
    acme = server["root"] / "acme"
    output = confine_job_paths(inference("evals/run-1.jsonl"), areas(server)).spec.inference.output_path
    assert output == str(acme / "outputs" / "evals" / "run-1.jsonl") and (acme / "outputs" / "evals").is_dir()
    dataset = confine_job_paths(job(dataset=job_pb2.DatasetReference(path="chats.jsonl")), areas(server))
    assert dataset.spec.dataset.path == str(acme / "datasets" / "chats.jsonl")
    model = confine_job_paths(local_model("mine", str(server["shared"] / "qwen")), areas(server)).spec.policy.model
    assert (model.local.path, model.local.tokenizer_path) == (str(acme / "models" / "mine"), str(server["shared"] / "qwen"))
    played = confine_job_paths(game({"dataset_path": "chats.jsonl", "eval_size": 3}), areas(server)).spec.environment
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
    assert refusal(server, job(dataset=job_pb2.DatasetReference(path="aof.jsonl"))) == (
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
    datasets = {refusal(server, job(dataset=job_pb2.DatasetReference(path=path)))
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
    for admin_job in (inference("/tmp/eval.jsonl"), job(dataset=job_pb2.DatasetReference(path="/data/chats.jsonl")),
                      local_model("/models/qwen"), game({"dataset_path": "/data/problems.jsonl"})):
        assert confine_job_paths(admin_job, areas(server)) == admin_job


def test_a_named_envhost_gets_paths_in_the_tenant_area_and_only_a_raw_address_is_left_alone(
        server: dict[str, Path]) -> None:
    """A named EnvHost may be the stack's own (named by its worker id): its games read the tenant's area.
    A raw envhost_address is admin-only (the Scheduler refuses it from tenant keys)."""
    named = confine_job_paths(game({"dataset_path": "chats.jsonl"}, envhost="envhost@127.0.0.1:50054"), areas(server))
    assert named.spec.environment.config["dataset_path"] == str(server["root"] / "acme" / "datasets" / "chats.jsonl")
    assert refusal(server, game({"dataset_path": ".opentinker/admin.key"}, envhost="envhost@127.0.0.1:50054")) == (
        "spec.environment.config['dataset_path']: no such file in your tenant area (datasets/)")
    resolved = game({"dataset_path": "../x"}, envhost="my-laptop", envhost_address="10.0.0.5:50054")
    assert "no such file" in refusal(server, resolved)
    raw = game({"dataset_path": "local/problems.jsonl"}, envhost_address="10.0.0.5:50054")
    assert confine_job_paths(raw, areas(server)) == raw
