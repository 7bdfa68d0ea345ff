"""Per-job tokens on the live stack (auth on): an admin key alone no longer acts on a job.

While a small RL job runs, calls to its Trainer and Rollout with a valid admin key but a missing
or forged job token, or with the right token and a fencing token outside the attempt (which
would have bumped the workers' fencing state), are refused with PERMISSION_DENIED
(ERROR_REASON_JOB_TOKEN_INVALID); the job succeeds untouched. After a re-queue, the earlier
attempt's token is refused too. The Rollout forwards the token on its EnvHost calls.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import grpc
import pytest

from opentinker_api.common.v1 import algorithm_pb2, datum_pb2, model_pb2, resources_pb2
from opentinker_api.coordinator.v1 import coordinator_service_pb2 as coordinator_pb
from opentinker_api.coordinator.v1 import coordinator_service_pb2_grpc as coordinator_grpc
from opentinker_api.envhost.v1 import envhost_service_pb2 as env_pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as env_grpc
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as rollout_grpc
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as scheduler_grpc
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as trainer_grpc
from opentinker.client import SchedulerClient
from opentinker.client.channels import keyed_channel
from opentinker_runtime.auth.job_tokens import JOB_TOKEN_METADATA_KEY, JOB_TOKEN_PATTERN, job_token_of
from opentinker_runtime.core.server import ServerPlan, ServiceBinding, start_server, stop_server
from opentinker_runtime.core.settings import ServiceSettings
from opentinker_rollout.envhost_client import EnvHostSession, EnvironmentTarget
from harness.job_specs import rl_spec
from harness.stack import LocalStack
from tests.chaos._security_stack import admin, stack  # noqa: F401 - the shared fixtures

pytestmark = pytest.mark.timeout(180)
MODEL = model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-qwen2", seed=3))
FULL = model_pb2.Adaptation(full=model_pb2.FullAdaptation())
REFUSED = grpc.StatusCode.PERMISSION_DENIED
REASON = "ERROR_REASON_JOB_TOKEN_INVALID"
Call = Callable[[list[tuple[str, str]]], Any]


@pytest.fixture(scope="module")
def scheduler(admin: SchedulerClient) -> SchedulerClient:
    return admin


@pytest.fixture(scope="module")
def workers(stack: LocalStack) -> Iterator[tuple[trainer_grpc.TrainerServiceStub, rollout_grpc.RolloutServiceStub]]:
    """Trainer and Rollout stubs that send the stack's admin key (and no job token of their own)."""
    with keyed_channel(stack.address("trainer"), stack.api_key) as trainer, \
            keyed_channel(stack.address("rollout"), stack.api_key) as rollout:
        yield trainer_grpc.TrainerServiceStub(trainer), rollout_grpc.RolloutServiceStub(rollout)


def with_token(token: str) -> list[tuple[str, str]]:
    return [(JOB_TOKEN_METADATA_KEY, token)] if token else []


def forged_token() -> str:
    return "otj_" + secrets.token_urlsafe(32)[:43]


def lease_of(job: job_pb2.Job, role: int) -> resources_pb2.LeaseContext:
    return next(a.lease for a in job.assignments if a.role == role)


def with_fencing(lease: resources_pb2.LeaseContext, fencing_token: int) -> resources_pb2.LeaseContext:
    return resources_pb2.LeaseContext(job_id=lease.job_id, lease_id=lease.lease_id, fencing_token=fencing_token)


def attempt_training(scheduler: SchedulerClient, job_id: str, attempt: int) -> job_pb2.Job:
    """The job once its `attempt` has reported a training step (its workers have all been called)."""
    for event in scheduler.watch_job(job_id):
        if event.WhichOneof("payload") == "metrics" and "time/rollout_s" in event.metrics.values:
            job = scheduler.get_job(job_id)
            if job.attempt == attempt and job.state == job_pb2.Job.STATE_RUNNING:
                return job
    raise AssertionError(f"job {job_id} ended before attempt {attempt} trained: {scheduler.get_job(job_id)}")


def lease_calls(trainer: trainer_grpc.TrainerServiceStub, rollout: rollout_grpc.RolloutServiceStub,
                trainer_lease: resources_pb2.LeaseContext,
                rollout_lease: resources_pb2.LeaseContext) -> dict[str, Call]:
    """Every Trainer and Rollout RPC that carries a lease, aimed at the job (sessions and
    policies that do not exist: the token is checked before anything is looked up)."""
    session = {"session_id": "sess-none", "lease": trainer_lease}
    return {
        "Trainer.CreateSession": lambda md: trainer.CreateSession(trainer_pb.CreateSessionRequest(
            lease=trainer_lease, base_model=MODEL, adaptation=FULL,
            optimizer=algorithm_pb2.OptimizerConfig(learning_rate=1e-3)), metadata=md),
        "Trainer.ForwardBackward": lambda md: trainer.ForwardBackward(trainer_pb.ForwardBackwardRequest(**session),
                                                                      metadata=md),
        "Trainer.OptimStep": lambda md: trainer.OptimStep(trainer_pb.OptimStepRequest(**session), metadata=md),
        "Trainer.SaveCheckpoint": lambda md: trainer.SaveCheckpoint(trainer_pb.SaveCheckpointRequest(**session),
                                                                    metadata=md),
        "Trainer.LoadCheckpoint": lambda md: trainer.LoadCheckpoint(trainer_pb.LoadCheckpointRequest(
            checkpoint_id="none", **session), metadata=md),
        "Trainer.CloseSession": lambda md: trainer.CloseSession(trainer_pb.CloseSessionRequest(**session), metadata=md),
        "Trainer.StartReplicas": lambda md: trainer.StartReplicas(trainer_pb.StartReplicasRequest(
            lease=trainer_lease, device_ids=["cpu:0"], first_rank=1, world_size=2, store_address="127.0.0.1:9",
            command_address="127.0.0.1:9", authkey=b"k" * 32), metadata=md),
        "Rollout.LoadModel": lambda md: rollout.LoadModel(rollout_pb.LoadModelRequest(lease=rollout_lease, model=MODEL),
                                                          metadata=md),
        "Rollout.UnloadModel": lambda md: rollout.UnloadModel(rollout_pb.UnloadModelRequest(
            policy_id="policy-none", lease=rollout_lease), metadata=md),
        "Rollout.UpdateWeights": lambda md: rollout.UpdateWeights(iter([rollout_pb.UpdateWeightsRequest(
            target=rollout_pb.UpdateWeightsTarget(policy_id="policy-none", lease=rollout_lease))]), metadata=md),
        "Rollout.RunEpisodes": lambda md: list(rollout.RunEpisodes(rollout_pb.RunEpisodesRequest(
            policy_id="policy-none", lease=rollout_lease), metadata=md)),
    }


def session_calls(trainer: trainer_grpc.TrainerServiceStub, rollout: rollout_grpc.RolloutServiceStub,
                  session_id: str, policy_id: str) -> dict[str, Call]:
    """The RPCs on a job's session or policy that carry no lease: checked against the job's token."""
    prompt = rollout_pb.Prompt(tokens=datum_pb2.TokenSequence(tokens=[1, 2, 3]))
    return {
        "Trainer.GetSession": lambda md: trainer.GetSession(trainer_pb.GetSessionRequest(session_id=session_id),
                                                            metadata=md),
        "Trainer.ComputeLogprobs": lambda md: trainer.ComputeLogprobs(trainer_pb.ComputeLogprobsRequest(
            session_id=session_id, sequences=[datum_pb2.TokenSequence(tokens=[1, 2, 3])]), metadata=md),
        "Trainer.ExportWeights": lambda md: next(iter(trainer.ExportWeights(trainer_pb.ExportWeightsRequest(
            session_id=session_id), metadata=md))),
        "Rollout.Sample": lambda md: rollout.Sample(rollout_pb.SampleRequest(policy_id=policy_id, prompts=[prompt]),
                                                    metadata=md),
        "Rollout.UnloadModel (no lease)": lambda md: rollout.UnloadModel(rollout_pb.UnloadModelRequest(
            policy_id=policy_id), metadata=md),
    }


def refusal(call: Call, metadata: list[tuple[str, str]]) -> grpc.RpcError:
    try:
        call(metadata)
    except grpc.RpcError as error:
        return error
    raise AssertionError("the call was accepted")


def assert_all_refused(calls: dict[str, Call], metadata: list[tuple[str, str]], *,
                       also: tuple[tuple[grpc.StatusCode, str], ...] = ()) -> None:
    accepted = {(REFUSED, REASON), *also}
    for name, call in calls.items():
        error = refusal(call, metadata)
        reason = dict(error.trailing_metadata() or ()).get("opentinker-reason", "")
        assert (error.code(), reason) in accepted, (name, error.code(), reason, error.details())
        assert "otj_" not in error.details()  # a refusal never echoes a token


def open_job_session(trainer: trainer_grpc.TrainerServiceStub, rollout: rollout_grpc.RolloutServiceStub,
                     job: job_pb2.Job, token: str) -> tuple[str, str]:
    """A session and a policy of the job, opened with its real token: (session_id, policy_id)."""
    session = trainer.CreateSession(trainer_pb.CreateSessionRequest(
        lease=lease_of(job, resources_pb2.ROLE_TRAINER), base_model=MODEL, adaptation=FULL,
        optimizer=algorithm_pb2.OptimizerConfig(learning_rate=1e-3)), metadata=with_token(token)).session
    policy = rollout.LoadModel(rollout_pb.LoadModelRequest(lease=lease_of(job, resources_pb2.ROLE_ROLLOUT),
                                                           model=MODEL), metadata=with_token(token)).policy
    assert session.job_id == job.job_id and policy.job_id == job.job_id
    return session.session_id, policy.policy_id


def test_calls_without_the_jobs_token_are_refused_and_the_job_succeeds(scheduler, workers) -> None:  # noqa: ANN001
    trainer, rollout = workers
    submitted = scheduler.submit_job(rl_spec(total_steps=4))
    job = attempt_training(scheduler, submitted.job_id, attempt=1)
    token = job_token_of(job)
    assert JOB_TOKEN_PATTERN.match(token)
    trainer_lease, rollout_lease = lease_of(job, resources_pb2.ROLE_TRAINER), lease_of(job, resources_pb2.ROLE_ROLLOUT)
    calls = lease_calls(trainer, rollout, trainer_lease, rollout_lease)
    assert_all_refused(calls, [])
    assert_all_refused(calls, with_token(forged_token()))
    far_ahead = lease_calls(trainer, rollout, with_fencing(trainer_lease, 10**9), with_fencing(rollout_lease, 10**9))
    assert_all_refused(far_ahead, with_token(token))  # accepted, it would have fenced the job out

    session_id, policy_id = open_job_session(trainer, rollout, job, token)
    on_session = session_calls(trainer, rollout, session_id, policy_id)
    assert_all_refused(on_session, [])
    assert_all_refused(on_session, with_token(forged_token()))
    assert trainer.GetSession(trainer_pb.GetSessionRequest(session_id=session_id), metadata=with_token(token))
    trainer.CloseSession(trainer_pb.CloseSessionRequest(session_id=session_id, lease=trainer_lease),
                         metadata=with_token(token))
    rollout.UnloadModel(rollout_pb.UnloadModelRequest(policy_id=policy_id, lease=rollout_lease),
                        metadata=with_token(token))

    final = scheduler.wait(job.job_id)
    assert final.state == job_pb2.Job.STATE_SUCCEEDED and final.attempt == 1, final.status_message
    steps = [e.metrics.step for e in scheduler.read_events(job.job_id)
             if e.WhichOneof("payload") == "metrics" and "time/rollout_s" in e.metrics.values]
    assert steps == [1, 2, 3, 4]


def test_the_previous_attempts_token_is_refused_after_a_requeue(stack: LocalStack, scheduler,  # noqa: ANN001
                                                                workers) -> None:  # noqa: ANN001
    trainer, rollout = workers
    submitted = scheduler.submit_job(rl_spec(total_steps=4, max_retries=1))
    first = attempt_training(scheduler, submitted.job_id, attempt=1)
    trainer_worker = next(a.worker_id for a in first.assignments if a.role == resources_pb2.ROLE_TRAINER)
    scheduler._call(scheduler.stub.DeregisterWorker, pb.DeregisterWorkerRequest(worker_id=trainer_worker))
    second = attempt_training(scheduler, submitted.job_id, attempt=2)  # the trainer registered again
    old_token, new_token = job_token_of(first), job_token_of(second)
    assert old_token and new_token and old_token != new_token

    stale = ((grpc.StatusCode.FAILED_PRECONDITION, "ERROR_REASON_STALE_FENCING_TOKEN"),)
    old_leases = lease_calls(trainer, rollout, lease_of(first, resources_pb2.ROLE_TRAINER),
                             lease_of(first, resources_pb2.ROLE_ROLLOUT))
    assert_all_refused(old_leases, with_token(old_token), also=stale)
    current_leases = lease_calls(trainer, rollout, lease_of(second, resources_pb2.ROLE_TRAINER),
                                 lease_of(second, resources_pb2.ROLE_ROLLOUT))
    assert_all_refused(current_leases, with_token(old_token))
    with keyed_channel(stack.address("scheduler"), stack.api_key) as channel:
        report = pb.ReportJobEventsRequest(lease=lease_of(second, resources_pb2.ROLE_COORDINATOR))
        assert_all_refused({"Scheduler.ReportJobEvents": lambda md: scheduler_grpc.SchedulerServiceStub(
            channel).ReportJobEvents(report, metadata=md)}, with_token(old_token))

    final = scheduler.wait(submitted.job_id)
    assert final.state == job_pb2.Job.STATE_SUCCEEDED and final.attempt == 2, final.status_message


def test_the_envhost_and_the_coordinator_refuse_a_jobs_calls_without_its_token(stack: LocalStack, scheduler) -> None:  # noqa: ANN001
    job = scheduler.submit_job(rl_spec(total_steps=4))  # queued or running: its token is required
    try:
        with keyed_channel(stack.address("envhost"), stack.api_key) as channel:
            envhost = env_grpc.EnvHostServiceStub(channel)
            request = env_pb.OpenSessionRequest(env_name="math", job_id=job.job_id)
            for metadata in ([], with_token(forged_token())):
                error = refusal(lambda md: envhost.OpenSession(request, metadata=md), metadata)
                assert error.code() == REFUSED
                assert dict(error.trailing_metadata() or ()).get("opentinker-reason") == REASON
                # the Interact stream answers the refusal as an item and stays open
                answers = list(envhost.Interact(iter([
                    env_pb.InteractRequest(sequence=1, open_session=request),
                    env_pb.InteractRequest(sequence=2, open_session=env_pb.OpenSessionRequest(env_name="math"))]),
                    metadata=metadata))
                # one answer per request, matched by sequence (the EnvHost answers in completion order)
                by_sequence = {a.sequence: a for a in answers}
                assert len(answers) == 2 and sorted(by_sequence) == [1, 2]
                assert by_sequence[1].error.code == REFUSED.value[0] and "job token" in by_sequence[1].error.message
                assert by_sequence[2].WhichOneof("result") == "open_session"  # not job-scoped: admin key suffices
        with keyed_channel(stack.address("coordinator"), stack.api_key) as channel:
            coordinator = coordinator_grpc.CoordinatorServiceStub(channel)
            calls = [lambda md: coordinator.OpenMatch(coordinator_pb.OpenMatchRequest(job_id=job.job_id), metadata=md),
                     lambda md: coordinator.ArriveAtBarrier(coordinator_pb.ArriveAtBarrierRequest(
                         job_id=job.job_id, agent_id="a", step=1), metadata=md, timeout=10)]
            for call in calls:
                for metadata in ([], with_token(forged_token())):
                    error = refusal(call, metadata)
                    assert error.code() == REFUSED, error.details()
    finally:
        scheduler.cancel_job(job.job_id)


class RecordingEnvHost(env_grpc.EnvHostServiceServicer):
    """An EnvHost that records the job token each call arrived with (a one-step game)."""

    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}

    def _record(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self.tokens[method] = dict(context.invocation_metadata() or ()).get(JOB_TOKEN_METADATA_KEY, "")

    async def OpenSession(self, request, context):  # noqa: ANN001, ANN201
        self._record("OpenSession", context)
        return env_pb.OpenSessionResponse(session_id="s1")

    async def Reset(self, request, context):  # noqa: ANN001, ANN201
        self._record("Reset", context)
        return env_pb.ResetResponse(initial_user_message="1+1=")

    async def Step(self, request, context):  # noqa: ANN001, ANN201
        self._record("Step", context)
        return env_pb.StepResponse(done=True, reward=1.0)

    async def CloseSession(self, request, context):  # noqa: ANN001, ANN201
        self._record("CloseSession", context)
        return env_pb.CloseSessionResponse(steps=1)


@dataclass(frozen=True, kw_only=True)
class RecordingEnvHostSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TESTENV_"


def test_the_rollout_forwards_the_job_token_on_every_envhost_call() -> None:
    async def scenario() -> dict[str, str]:
        envhost = RecordingEnvHost()
        binding = ServiceBinding(full_name="opentinker.envhost.v1.EnvHostService", servicer=envhost,
                                 add_to_server=env_grpc.add_EnvHostServiceServicer_to_server)
        server = await start_server(RecordingEnvHostSettings(auth="disabled"), ServerPlan(services=[binding]))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                target = EnvironmentTarget(address="envhost", env_name="math", job_id="job-1",
                                           job_token="otj_" + "t" * 43)
                session = EnvHostSession(env_grpc.EnvHostServiceStub(channel), target)
                await session.open()
                await session.reset({}, seed=1)
                await session.step("2")
                await session.close()
        finally:
            await stop_server(server, grace_seconds=0.2)
        return envhost.tokens

    tokens = asyncio.run(scenario())
    assert tokens == {method: "otj_" + "t" * 43 for method in ("OpenSession", "Reset", "Step", "CloseSession")}
    assert "otj_" not in repr(EnvironmentTarget(address="a", env_name="math", job_token="otj_" + "t" * 43))
