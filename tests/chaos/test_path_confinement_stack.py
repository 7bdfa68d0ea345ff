"""Tenant areas on the live stack (`opentinker up`, auth on): a tenant's INFERENCE job reads its game's
dataset from, and writes its JSONL into, its own area; a symlink planted in the area cannot make the
stack read a server file or another tenant's checkpoint, and the job's failure reads the same whether
the target exists or not; absolute paths are refused at SubmitJob, validate_only included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from opentinker.client.errors import InvalidArgument
from harness import job_specs
from harness.stack import LocalStack
from tests.chaos._security_stack import admin, stack  # noqa: F401 - the shared fixtures

PROBLEMS = [{"question": f"What is {a} + {a}?", "answer": str(2 * a)} for a in range(1, 9)]


def inference_spec(*, output_path: str = "", dataset_path: str = "", model_path: str = "") -> dict:
    extra = {"dataset_path": dataset_path} if dataset_path else {}
    return job_specs.inference_spec(model=job_specs.local_model(model_path) if model_path else None,
                                    environment=job_specs.math_env(3, 2, **extra), output_path=output_path)


def ended(client: SchedulerClient, spec: dict) -> job_pb2.Job:
    return client.wait(client.submit_job(spec).job_id)


@pytest.fixture(scope="module")
def acme(stack: LocalStack, admin: SchedulerClient) -> tuple[SchedulerClient, Path]:  # noqa: F811
    """Tenant acme's client and its area, where a dataset and two planted symlinks lie."""
    key = admin.create_tenant("paths-acme").api_key_secret
    area = stack.state_dir / "tenants" / "paths-acme"
    (area / "datasets").mkdir(parents=True)
    (area / "models").mkdir(parents=True)
    (area / "datasets" / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    secret = stack.state_dir / "server-secret.jsonl"  # a readable server file, valid math data even
    secret.write_text(json.dumps({"question": "admin key?", "answer": "42"}) + "\n")
    os.symlink(secret, area / "datasets" / "leak.jsonl")
    os.symlink(stack.state_dir / "checkpoints", area / "models" / "stolen")
    with SchedulerClient(stack.address("scheduler"), api_key=key, timeout=30) as client:
        yield client, area


def test_a_tenants_job_reads_and_writes_inside_its_area(acme: tuple[SchedulerClient, Path]) -> None:
    client, area = acme
    job = ended(client, inference_spec(output_path="evals/run-1.jsonl", dataset_path="problems.jsonl"))
    assert job.state == job_pb2.Job.STATE_SUCCEEDED, job.status_message
    written = area / "outputs" / "evals" / "run-1.jsonl"
    lines = [json.loads(line) for line in written.read_text().splitlines()]
    assert len(lines) == 2 and all(line["prompt"] for line in lines)
    questions = {p["question"] for p in PROBLEMS}
    assert all(any(q in line["prompt"] for q in questions) for line in lines)  # the tenant's own dataset
    # the message names the file as the tenant knows it, never where the server keeps it
    assert job.status_message.startswith("wrote 2 episodes to evals/run-1.jsonl")
    assert str(area) not in job.status_message
    [artifact] = [a for a in client.list_artifacts(job.job_id) if a.artifact_id.endswith("/run-1.jsonl")]
    assert artifact.files[0].size_bytes == written.stat().st_size


def test_planted_symlinks_reach_nothing_and_tell_nothing(acme: tuple[SchedulerClient, Path]) -> None:
    client, _ = acme
    datasets = [ended(client, inference_spec(dataset_path=path)) for path in ("leak.jsonl", "absent.jsonl")]
    models = [ended(client, inference_spec(model_path=path)) for path in ("stolen", "absent")]
    for jobs, message in ((datasets, "spec.environment.config['dataset_path']: no such file in your tenant area "
                                     "(datasets/)"),
                          (models, "spec.policy.model.local.path: no such model directory in your tenant area "
                                   "(models/) or the shared model directory")):
        assert [job.state for job in jobs] == [job_pb2.Job.STATE_FAILED] * 2
        assert {job.status_message for job in jobs} == {f"PathRefused: {message}"}


@pytest.mark.parametrize("spec", [inference_spec(output_path="/etc/passwd"),
                                  inference_spec(output_path="../paths-other/outputs/x.jsonl"),
                                  inference_spec(dataset_path="/etc/passwd"),
                                  inference_spec(model_path=os.path.join("/", "tmp", "checkpoints"))],
                         ids=["absolute-output", "dotdot-output", "absolute-dataset", "absolute-model"])
def test_absolute_and_dotdot_paths_are_refused_at_submit(acme: tuple[SchedulerClient, Path], spec: dict) -> None:
    client, _ = acme
    with pytest.raises(InvalidArgument, match="must be a path relative to your tenant area"):
        client.submit_job(spec)
