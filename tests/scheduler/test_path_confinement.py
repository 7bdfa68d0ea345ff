"""SubmitJob confines a tenant key's paths to its tenant area and its models to its own checkpoints.

A real Scheduler with auth on and a real Redis: a tenant key may not name an absolute path, a
'..' or a NUL in any path of its spec (validate_only included), except local models in the shared
model directory; an admin key may (what the quickstart and the examples do). A checkpoint
belongs to the tenant whose job reported it: another tenant naming it gets exactly the answer an
unknown id gets.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from opentinker_api.common.v1 import environment_pb2, model_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.channels import authenticated_channel
from tests.scheduler import _auth_server
from tests.scheduler._auth_server import ADMIN_KEY
from tests.scheduler._harness import FAST, lease_of, reason_of, register_pool, rl_spec, rpc_error
from tests.scheduler._tenants import new_tenant

SHARED_MODELS = "/srv/shared-models"


def inference_spec(edit: Callable[[job_pb2.JobSpec], object]) -> job_pb2.JobSpec:
    spec = rl_spec(type=job_pb2.JOB_TYPE_INFERENCE)
    spec.ClearField("training")
    edit(spec)
    return spec


def local_model(path: str, tokenizer_path: str = "") -> Callable[[job_pb2.JobSpec], object]:
    return lambda s: s.policy.model.CopyFrom(model_pb2.ModelReference(
        local=model_pb2.LocalModel(path=path, tokenizer_path=tokenizer_path)))


def game_config(config: dict, field: str = "environment") -> Callable[[job_pb2.JobSpec], object]:
    def edit(spec: job_pb2.JobSpec) -> None:
        environment = getattr(spec, field) if field == "environment" else spec.multi_agent.eval_environment
        environment.env_name = "math"
        environment.config.update(config)
    return edit


def sft(path: str) -> Callable[[job_pb2.JobSpec], object]:
    def edit(spec: job_pb2.JobSpec) -> None:
        spec.type = job_pb2.JOB_TYPE_SFT
        spec.training.CopyFrom(job_pb2.TrainingConfig(total_steps=1, batch_size=1))
        spec.dataset.path = path
    return edit


OUTSIDE = [
    (lambda s: setattr(s.inference, "output_path", "/etc/passwd"), "spec.inference.output_path"),
    (lambda s: setattr(s.inference, "output_path", "../system/outputs/x.jsonl"), "spec.inference.output_path"),
    (lambda s: setattr(s.inference, "output_path", "a/../../b.jsonl"), "spec.inference.output_path"),
    (lambda s: setattr(s.inference, "output_path", "~root/x.jsonl"), "spec.inference.output_path"),
    (lambda s: setattr(s.inference, "output_path", "out\x00.jsonl"), "spec.inference.output_path"),
    (lambda s: setattr(s.inference, "output_path", "x" * 300), "spec.inference.output_path"),
    (sft("/etc/passwd"), "spec.dataset.path"),
    (sft(".."), "spec.dataset.path"),
    (local_model("/var/lib/opentinker/checkpoints/ckpt-1/model"), "spec.policy.model.local.path"),
    (local_model(f"{SHARED_MODELS}/../etc"), "spec.policy.model.local.path"),
    (local_model(SHARED_MODELS), "spec.policy.model.local.path"),
    (local_model("mine", "/etc"), "spec.policy.model.local.tokenizer_path"),
    (game_config({"dataset_path": "/etc/passwd"}), "spec.environment.config['dataset_path']"),
    (game_config({"levels": [{"path": "../../x"}]}), "spec.environment.config['levels'][0]['path']"),
    (game_config({"extra_paths": ["ok.jsonl", "/etc/shadow"]}), "spec.environment.config['extra_paths'][1]"),
]


def tenant_stub(address: str, key: str) -> tuple[grpc.aio.Channel, pb_grpc.SchedulerServiceStub]:
    channel = authenticated_channel(address, key)
    return channel, pb_grpc.SchedulerServiceStub(channel)


def with_shared_models():  # noqa: ANN201 - the auth server's config, with a shared model directory
    return dataclasses.replace(FAST, shared_model_dir=Path(SHARED_MODELS))


@pytest.fixture
def shared_model_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_auth_server, "FAST", with_shared_models())


@pytest.mark.usefixtures("shared_model_config")
def test_a_tenant_keys_paths_must_stay_in_its_area_and_admin_keys_keep_any_path(redis_url: str) -> None:
    async def scenario() -> None:
        async with _auth_server.scheduler_server(redis_url) as h:
            channel, acme = tenant_stub(h.address, await new_tenant(h, "acme"))
            async with channel:
                for edit, field in OUTSIDE:
                    spec = inference_spec(edit)
                    for validate_only in (True, False):
                        error = await rpc_error(acme.SubmitJob(pb.SubmitJobRequest(spec=spec,
                                                                                   validate_only=validate_only)))
                        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, error.details())
                        assert error.details().startswith(f"{field}: must be a path relative to your tenant area"), \
                            error.details()
                        assert reason_of(error) == "ERROR_REASON_PATH_NOT_ALLOWED"
                    admin = await h.stub.SubmitJob(pb.SubmitJobRequest(spec=spec, validate_only=True))
                    assert admin.job.spec == spec  # an operator's absolute paths, as before
                assert (await acme.ListJobs(pb.ListJobsRequest())).jobs == []

    asyncio.run(scenario())


INSIDE = [
    lambda s: setattr(s.inference, "output_path", "evals/run-1.jsonl"),
    lambda s: setattr(s.inference, "output_path", "./a..b/.hidden.jsonl"),
    sft("chats/train.jsonl"),
    local_model("qwen-small"),
    local_model(f"{SHARED_MODELS}/qwen2-0.5b", f"{SHARED_MODELS}/qwen2-0.5b/tokenizer"),
    game_config({"dataset_path": "problems.jsonl", "eval_size": 5}),
    game_config({"dataset_path": "eval.jsonl"}, field="eval_environment"),
]


@pytest.mark.usefixtures("shared_model_config")
def test_paths_inside_the_tenant_area_and_shared_models_are_accepted(redis_url: str) -> None:
    async def scenario() -> None:
        async with _auth_server.scheduler_server(redis_url) as h:
            channel, acme = tenant_stub(h.address, await new_tenant(h, "acme"))
            async with channel:
                for index, edit in enumerate(INSIDE):
                    spec = inference_spec(edit)
                    if spec.HasField("multi_agent"):  # an eval environment belongs to a multi-agent job
                        spec.ClearField("multi_agent")
                        spec.environment.config.update({"dataset_path": "eval.jsonl"})
                    response = await acme.SubmitJob(pb.SubmitJobRequest(request_id=f"in-{index}", spec=spec))
                    assert response.created and response.job.spec == spec

    asyncio.run(scenario())


async def saved_checkpoint(h, tenant_key: str, checkpoint_id: str, agent_checkpoint_id: str) -> None:  # noqa: ANN001
    """Run a job of the key's tenant and report a CheckpointSaved, as its Coordinator does."""
    channel, tenant = tenant_stub(h.address, tenant_key)
    async with channel:
        job_id = (await tenant.SubmitJob(pb.SubmitJobRequest(request_id="train", spec=rl_spec()))).job.job_id
    await h.scheduler.allocator.tick()
    job = (await h.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job
    saved = job_pb2.JobEvent(checkpoint=job_pb2.CheckpointSaved(
        checkpoint_id=checkpoint_id, step=1, agent_checkpoint_ids={"white": agent_checkpoint_id}))
    async with authenticated_channel(h.address, ADMIN_KEY, job_token=job.assignments[0].job_token) as coordinator:
        await pb_grpc.SchedulerServiceStub(coordinator).ReportJobEvents(
            pb.ReportJobEventsRequest(lease=lease_of(job), events=[saved]))


def from_checkpoint(checkpoint_id: str) -> job_pb2.JobSpec:
    return inference_spec(lambda s: s.policy.model.CopyFrom(model_pb2.ModelReference(
        checkpoint=model_pb2.CheckpointModel(checkpoint_id=checkpoint_id))))


def test_a_checkpoint_is_usable_only_by_the_tenant_whose_job_saved_it(redis_url: str) -> None:
    async def scenario() -> None:
        async with _auth_server.scheduler_server(redis_url) as h:
            await register_pool(h)
            acme_key, globex_key = await new_tenant(h, "acme"), await new_tenant(h, "globex")
            await saved_checkpoint(h, acme_key, "ckpt-acme-1", "ckpt-acme-white-1")
            channel, globex = tenant_stub(h.address, globex_key)
            async with channel:
                answers = []
                for checkpoint_id in ("ckpt-acme-1", "ckpt-acme-white-1", "ckpt-none-01"):
                    for validate_only in (True, False):
                        error = await rpc_error(globex.SubmitJob(pb.SubmitJobRequest(
                            spec=from_checkpoint(checkpoint_id), validate_only=validate_only)))
                        answers.append((error.code(), reason_of(error), error.details().replace(checkpoint_id, "ID")))
                assert set(answers) == {(grpc.StatusCode.NOT_FOUND, "ERROR_REASON_INVALID_FIELD",
                                         "spec.policy.model.checkpoint.checkpoint_id: no checkpoint 'ID' among your "
                                         "tenant's; name a checkpoint your own jobs saved (see their CheckpointSaved "
                                         "events)")}
            channel, acme = tenant_stub(h.address, acme_key)
            async with channel:
                for checkpoint_id in ("ckpt-acme-1", "ckpt-acme-white-1"):
                    assert (await acme.SubmitJob(pb.SubmitJobRequest(request_id=checkpoint_id,
                                                                     spec=from_checkpoint(checkpoint_id)))).created
            admin = await h.stub.SubmitJob(pb.SubmitJobRequest(spec=from_checkpoint("ckpt-acme-1"), validate_only=True))
            assert admin.job.spec == from_checkpoint("ckpt-acme-1")

    asyncio.run(scenario())


def test_a_multi_agent_spec_checks_every_agents_paths(redis_url: str) -> None:
    async def scenario() -> None:
        async with _auth_server.scheduler_server(redis_url) as h:
            channel, acme = tenant_stub(h.address, await new_tenant(h, "acme"))
            async with channel:
                spec = rl_spec()
                spec.ClearField("policy")
                for agent_id in ("black", "white"):
                    agent = spec.agents.add(agent_id=agent_id)
                    agent.CopyFrom(rl_spec().policy)
                    agent.agent_id = agent_id
                spec.agents[1].model.CopyFrom(model_pb2.ModelReference(local=model_pb2.LocalModel(path="/root")))
                spec.environment.CopyFrom(environment_pb2.EnvironmentReference(env_name="gomoku"))
                error = await rpc_error(acme.SubmitJob(pb.SubmitJobRequest(spec=spec, validate_only=True)))
                assert error.details().startswith("spec.agents[1].model.local.path: must be a path relative")

    asyncio.run(scenario())
