"""ListArtifacts / DownloadArtifact over real gRPC: a job's checkpoints and outputs for its tenant only."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from pathlib import Path

import grpc
import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.auth.api_keys import new_api_key
from tests.scheduler._harness import FAST, rl_spec, rpc_error, scheduler_server
from tests.scheduler._tenants import new_tenant, stub_for

ADMIN_KEY = new_api_key()


def write_checkpoint(root: Path, job_id: str, name: str, *, step: int, files: dict[str, bytes],
                     fmt: str = "training_state", manifest_job: str | None = None) -> Path:
    directory = root / f"{job_id}-{name}"
    for relative, content in files.items():
        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
        (directory / relative).write_bytes(content)
    (directory / "checkpoint.json").write_text(json.dumps({"job_id": manifest_job or job_id, "format": fmt,
                                                           "step": step, "checkpoint_id": directory.name}))
    return directory


async def download(stub, artifact_id: str, prefix: str = "") -> dict[str, tuple[pb.ArtifactFile, bytes]]:  # noqa: ANN001
    files: dict[str, tuple[pb.ArtifactFile, bytes]] = {}
    current = None
    async for message in stub.DownloadArtifact(pb.DownloadArtifactRequest(artifact_id=artifact_id,
                                                                          path_prefix=prefix)):
        if message.HasField("file"):
            current = message.file
            files[current.path] = (current, b"")
        else:
            header, data = files[current.path]
            assert len(message.data) <= 1 << 20
            files[current.path] = (header, data + message.data)
    return files


def inference_spec(output_path: str = "") -> job_pb2.JobSpec:
    spec = rl_spec()
    spec.type = job_pb2.JOB_TYPE_INFERENCE
    spec.ClearField("training")
    spec.policy.ClearField("adaptation")
    spec.policy.ClearField("algorithm")
    spec.inference.num_episodes = 2
    spec.inference.output_path = output_path
    return spec


def test_a_tenant_lists_and_downloads_its_jobs_checkpoints_and_outputs_and_never_another_tenants(
        redis_url: str, tmp_path: Path) -> None:
    checkpoints, tenants = tmp_path / "checkpoints", tmp_path / "tenants"
    config = dataclasses.replace(FAST, checkpoint_root=checkpoints, tenant_data_dir=tenants)
    big = bytes(range(256)) * 9000  # 2.2 MiB: three chunks

    async def scenario() -> None:
        async with scheduler_server(redis_url, config=config, admin_key=ADMIN_KEY) as h:
            acme_channel, acme = stub_for(h.address, await new_tenant(h, "acme"))
            globex_channel, globex = stub_for(h.address, await new_tenant(h, "globex"))
            job = (await acme.SubmitJob(pb.SubmitJobRequest(request_id="a", spec=rl_spec()))).job
            other = (await globex.SubmitJob(pb.SubmitJobRequest(request_id="b", spec=rl_spec()))).job
            write_checkpoint(checkpoints, job.job_id, "final", step=3, fmt="peft_adapter", files={
                "adapter/adapter_config.json": b'{"r": 8}', "adapter/adapter_model.safetensors": big})
            write_checkpoint(checkpoints, job.job_id, "step-1", step=1, files={"training_state.pt": b"state"})
            write_checkpoint(checkpoints, job.job_id, "stray", step=9, files={"x": b"x"}, manifest_job=other.job_id)
            (checkpoints / f"{job.job_id}-linked").symlink_to(checkpoints / f"{job.job_id}-final")
            write_checkpoint(checkpoints, other.job_id, "final", step=3, files={"training_state.pt": b"theirs"})

            listed = (await acme.ListArtifacts(pb.ListArtifactsRequest(job_id=job.job_id))).artifacts
            assert [(a.artifact_id, a.step, a.kind) for a in listed] == [
                (f"{job.job_id}-step-1", 1, pb.Artifact.KIND_CHECKPOINT),
                (f"{job.job_id}-final", 3, pb.Artifact.KIND_CHECKPOINT)]
            first = await acme.ListArtifacts(pb.ListArtifactsRequest(job_id=job.job_id, page_size=1))
            second = await acme.ListArtifacts(pb.ListArtifactsRequest(job_id=job.job_id, page_size=1,
                                                                      page_token=first.next_page_token))
            assert [a.artifact_id for a in (*first.artifacts, *second.artifacts)] == [a.artifact_id for a in listed]
            assert second.next_page_token == ""
            final = listed[1]
            assert final.format == "peft_adapter" and list(final.loadable_dirs) == ["adapter"]
            sums = {f.path: (f.size_bytes, f.sha256) for f in final.files}
            assert sums["adapter/adapter_model.safetensors"] == (len(big), hashlib.sha256(big).hexdigest())
            assert final.size_bytes == sum(f.size_bytes for f in final.files)

            adapter = await download(acme, final.artifact_id, "adapter/")
            assert set(adapter) == {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"}
            header, data = adapter["adapter/adapter_model.safetensors"]
            assert data == big and header.sha256 == hashlib.sha256(data).hexdigest()
            whole = await download(acme, final.artifact_id)
            assert "checkpoint.json" in whole and len(whole) == 3

            for stub, artifact_id in ((globex, final.artifact_id), (acme, f"{other.job_id}-final"),
                                      (acme, f"{job.job_id}-stray"), (acme, f"{job.job_id}-linked")):
                error = await rpc_error(download(stub, artifact_id))
                assert error.code() == grpc.StatusCode.NOT_FOUND, (artifact_id, error.details())
            error = await rpc_error(globex.ListArtifacts(pb.ListArtifactsRequest(job_id=job.job_id)))
            assert error.code() == grpc.StatusCode.NOT_FOUND and "acme" not in error.details()
            for bad in ("../etc/passwd", f"{job.job_id}/../../x", "job-1234-final", ""):
                error = await rpc_error(download(acme, bad))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "artifact_id" in error.details()
            missing = await rpc_error(download(acme, final.artifact_id, "model"))
            assert missing.code() == grpc.StatusCode.NOT_FOUND and "adapter" in missing.details()
            await acme_channel.close()
            await globex_channel.close()

    asyncio.run(scenario())


def test_an_inference_jobs_jsonl_in_its_tenants_area_is_an_artifact_and_one_outside_is_not(
        redis_url: str, tmp_path: Path) -> None:
    tenants = tmp_path / "tenants"
    config = dataclasses.replace(FAST, checkpoint_root=tmp_path / "none", tenant_data_dir=tenants)

    async def scenario() -> None:
        async with scheduler_server(redis_url, config=config, admin_key=ADMIN_KEY) as h:
            channel, acme = stub_for(h.address, await new_tenant(h, "acme"))
            default = (await acme.SubmitJob(pb.SubmitJobRequest(request_id="d", spec=inference_spec()))).job
            named = (await acme.SubmitJob(pb.SubmitJobRequest(request_id="n", spec=inference_spec("evals/run.jsonl")))).job
            outputs = tenants / "acme" / "outputs"
            (outputs / "evals").mkdir(parents=True)
            (outputs / f"{default.job_id}.jsonl").write_text('{"reward": 1}\n')
            (outputs / "evals" / "run.jsonl").write_text('{"reward": 0}\n{"reward": 1}\n')

            for job, name, content in ((default, f"{default.job_id}.jsonl", b'{"reward": 1}\n'),
                                       (named, "run.jsonl", b'{"reward": 0}\n{"reward": 1}\n')):
                listed = (await acme.ListArtifacts(pb.ListArtifactsRequest(job_id=job.job_id))).artifacts
                assert [(a.artifact_id, a.kind, a.format) for a in listed] == [
                    (f"{job.job_id}/{name}", pb.Artifact.KIND_OUTPUT, "jsonl")]
                files = await download(acme, listed[0].artifact_id)
                assert files[name][1] == content
            # an admin's absolute output path is written where the admin said, never served
            admin_job = (await h.stub.SubmitJob(pb.SubmitJobRequest(
                request_id="abs", spec=inference_spec(str(tmp_path / "secret.jsonl"))))).job
            (tmp_path / "secret.jsonl").write_text("{}\n")
            assert not (await h.stub.ListArtifacts(pb.ListArtifactsRequest(job_id=admin_job.job_id))).artifacts
            await channel.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("request_", [pb.ListArtifactsRequest(job_id="nope"), pb.ListArtifactsRequest()])
def test_listing_a_malformed_or_unknown_job_says_which(redis_url: str, request_: pb.ListArtifactsRequest) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            error = await rpc_error(h.stub.ListArtifacts(request_))
            assert error.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
            assert "job_id" in error.details() or "not found" in error.details()

    asyncio.run(scenario())
