"""A field followed from the spec to the Trainer's and Rollout's requests: the spec is resolved once
into a plan, and what the Coordinator's adapters send (over real gRPC, to fakes that record the
requests) is the plan's values, defaults included; nothing on the way re-reads the spec."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest

from opentinker_api.common.v1 import algorithm_pb2, model_pb2, resources_pb2, trajectory_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as rollout_grpc
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as trainer_grpc
from opentinker_runtime.jobplan import JobPlan, resolve_job_plan
from opentinker_coordinator.adapters.remote import RemoteRollout, RemoteTrainer, RolloutPolicy
from opentinker_coordinator.launch import trainer_session
from opentinker_coordinator.types import Datum, EpisodeRequest
from tests.jobplan.specs import least_spec

LEASE = resources_pb2.LeaseContext(job_id="job-trace", lease_id="l1", fencing_token=3)


class RecordingTrainer(trainer_grpc.TrainerServiceServicer):
    """Answers what the adapter needs and keeps every request."""

    def __init__(self) -> None:
        self.requests: list[object] = []

    async def CreateSession(self, request, context):  # noqa: ANN001, ANN201, N802
        self.requests.append(request)
        return trainer_pb.CreateSessionResponse(session=trainer_pb.Session(session_id="s1"))

    async def ForwardBackward(self, request, context):  # noqa: ANN001, ANN201, N802
        self.requests.append(request)
        return trainer_pb.ForwardBackwardResponse(loss=0.5, num_tokens=3)


class RecordingRollout(rollout_grpc.RolloutServiceServicer):
    def __init__(self) -> None:
        self.requests: list[object] = []

    async def LoadModel(self, request, context):  # noqa: ANN001, ANN201, N802
        self.requests.append(request)
        return rollout_pb.LoadModelResponse(policy=rollout_pb.Policy(policy_id="p1"))

    async def RunEpisodes(self, request, context):  # noqa: ANN001, ANN201, N802
        self.requests.append(request)
        for episode in request.episodes:
            yield rollout_pb.RunEpisodesResponse(trajectory=trajectory_pb2.Trajectory(group_id=episode.group_id))


@asynccontextmanager
async def fakes() -> AsyncIterator[tuple[RecordingTrainer, RecordingRollout, grpc.aio.Channel]]:
    trainer, rollout = RecordingTrainer(), RecordingRollout()
    server = grpc.aio.server()
    trainer_grpc.add_TrainerServiceServicer_to_server(trainer, server)
    rollout_grpc.add_RolloutServiceServicer_to_server(rollout, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield trainer, rollout, channel
    finally:
        await server.stop(grace=None)


def traced_spec() -> job_pb2.JobSpec:
    """An RL spec that sets a few fields and leaves others to their defaults."""
    spec = least_spec("RL", **{"policy.algorithm.optimizer.learning_rate": 3e-4, "policy.sampling.temperature": 0.6,
                               "environment.envhost_address": "10.1.2.3:50054", "training.seed": 7})
    spec.policy.adaptation.lora.target_modules.append("q_proj")
    return spec


def sent(plan: JobPlan, job: job_pb2.Job) -> tuple[list[object], list[object]]:
    """What the launcher's Trainer and Rollout adapters send when the driver opens them, trains on
    one datum and plays one training and one evaluation batch."""
    async def scenario() -> tuple[list[object], list[object]]:
        async with fakes() as (trainer_service, rollout_service, channel):
            trainer = RemoteTrainer(channel, trainer_session(job, plan, plan.policy), LEASE)
            rollout = RemoteRollout(channel, RolloutPolicy(request_prefix=job.job_id, policy=plan.policy,
                                                           environment=plan.environment), LEASE)
            await trainer.open()
            await rollout.open()
            await trainer.forward_backward([Datum(tokens=[1, 2, 3], loss_mask=[0, 1, 1], advantages=[0, 1, 1],
                                                  sampling_logprobs=[0, -1, -1], group_id="g")])
            requests = [EpisodeRequest(group_id="g0", seed=1, reset_kwargs={"index": 0})]
            for evaluation in (False, True):
                assert [t.group_id async for t in rollout.run_episodes(requests, 2, evaluation=evaluation)] == ["g0"]
            return trainer_service.requests, rollout_service.requests

    return asyncio.run(scenario())


@pytest.fixture(scope="module")
def traced() -> tuple[JobPlan, list[object], list[object]]:
    job = job_pb2.Job(job_id="job-trace", spec=traced_spec())
    job.assignments.add(role=resources_pb2.ROLE_TRAINER, device_ids=["cpu:0"])
    plan = resolve_job_plan(job.spec, job_id=job.job_id)
    return (plan, *sent(plan, job))


def test_the_learning_rate_and_the_optimizers_defaults_reach_the_trainer_from_the_plan(traced) -> None:
    plan, (create, _), _ = traced
    optimizer = plan.policy.optimizer
    assert create.optimizer.learning_rate == pytest.approx(3e-4) and optimizer.learning_rate == pytest.approx(3e-4)
    assert (create.optimizer.beta1, create.optimizer.beta2) == pytest.approx((optimizer.beta1, optimizer.beta2))
    assert create.optimizer.beta1 == pytest.approx(0.9)  # the table's default, sent explicitly
    assert create.optimizer.total_steps == plan.training.total_steps == 10
    assert (create.seed, list(create.device_ids)) == (7, ["cpu:0"])


def test_the_lora_rank_and_alpha_are_resolved_once_for_trainer_and_rollout(traced) -> None:
    plan, (create, _), (load, *_) = traced
    lora = plan.policy.adaptation.lora
    assert (lora.rank, lora.alpha, lora.target_modules) == (8, 16.0, ("q_proj",))
    for adaptation in (create.adaptation, load.adaptation):
        assert (adaptation.lora.rank, adaptation.lora.alpha) == (8, 16.0)
        assert list(adaptation.lora.target_modules) == ["q_proj"]
    assert create.base_model == load.model == model_pb2.ModelReference(
        builtin=model_pb2.BuiltinModel(name="tiny-llama"))


def test_the_sampling_temperature_drives_training_sampling_and_the_loss(traced) -> None:
    plan, (_, backward), (_, train, evaluate) = traced
    assert plan.policy.sampling.temperature == pytest.approx(0.6)
    assert train.sampling.temperature == pytest.approx(0.6) and train.sampling.max_new_tokens == 256
    assert evaluate.sampling.temperature == 0 and evaluate.sampling.n == 1
    assert backward.loss.temperature == pytest.approx(plan.policy.loss.temperature) == pytest.approx(0.6)
    assert backward.loss.function == algorithm_pb2.LOSS_FUNCTION_PPO_CLIP


def test_the_envhost_address_reaches_the_rollout_as_resolved(traced) -> None:
    plan, _, (_, train, evaluate) = traced
    assert plan.environment.envhost_address == "10.1.2.3:50054"
    for request in (train, evaluate):
        assert (request.environment.env_name, request.environment.envhost_address) == ("math", "10.1.2.3:50054")


def test_an_inference_jobs_policy_has_no_trainer_side_and_plays_greedily() -> None:
    """The launcher opens no Trainer session for it (its plan has no loss nor optimizer)."""
    job = job_pb2.Job(job_id="job-infer", spec=least_spec("INFERENCE", **{"policy.sampling.temperature": 0.9}))
    plan = resolve_job_plan(job.spec, job_id=job.job_id)
    assert plan.policy.loss is None and plan.policy.optimizer is None and plan.inference.output_path == "job-infer.jsonl"

    async def scenario() -> list[object]:
        async with fakes() as (_, rollout_service, channel):
            rollout = RemoteRollout(channel, RolloutPolicy(request_prefix=job.job_id, policy=plan.policy,
                                                           environment=plan.environment), LEASE)
            await rollout.open()
            requests = [EpisodeRequest(group_id="g0", seed=1, reset_kwargs={"index": 0})]
            assert [t.group_id async for t in rollout.run_episodes(requests, 1, evaluation=True)] == ["g0"]
            return rollout_service.requests

    _, played = asyncio.run(scenario())
    assert played.sampling.temperature == 0 and played.sampling.max_new_tokens == 256
