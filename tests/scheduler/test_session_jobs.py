"""SESSION jobs: a tenant's Tinker training client as a job of the Scheduler, driven by a gateway
worker (ROLE_GATEWAY) the way a Coordinator drives the other types, and never retried.

Validation and placement are pure; the rest runs a real Scheduler (auth on) on a real Redis with a
fake gateway that registers, heartbeats and finishes the job as the gateway service does."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from opentinker_api.common.v1 import environment_pb2, model_pb2, resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.auth.api_keys import new_api_key
from opentinker_runtime.auth.job_tokens import JOB_TOKEN_METADATA_KEY
from opentinker_runtime.jobplan import defaults
from opentinker_scheduler.convert_jobs import facts_from_spec
from opentinker_scheduler.errors import InvalidArgument
from opentinker_scheduler.model import JobState, JobType, QueuedJob, ResourceRequest, Role, Worker, WorkerState
from opentinker_scheduler.placement import job_requests, place, worker_slots
from tests.scheduler._harness import (FAST, ManualClock, register_pool, register_request, rl_spec, rpc_error,
                                      scheduler_server)
from tests.scheduler._tenants import new_tenant, stub_for

S = job_pb2.Job
ADMIN_KEY = new_api_key()
GATEWAY, TRAINER, ROLLOUT = resources_pb2.ROLE_GATEWAY, resources_pb2.ROLE_TRAINER, resources_pb2.ROLE_ROLLOUT


def session_spec() -> job_pb2.JobSpec:
    """The least a SESSION job needs: a model and how it adapts (the client sends the rest)."""
    return job_pb2.JobSpec(type=job_pb2.JOB_TYPE_SESSION, display_name="tinker-client", policy=job_pb2.AgentSpec(
        model=model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-llama", seed=1)),
        adaptation=model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=8, alpha=16))))


def refusal(spec: job_pb2.JobSpec) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as raised:
        facts_from_spec(spec).raise_problem()
    return raised.value


# --- validation -------------------------------------------------------------------------------

def test_a_minimal_session_spec_is_accepted_with_a_trainer_and_a_rollout_and_no_retries() -> None:
    facts = facts_from_spec(session_spec())
    assert facts.type is JobType.SESSION
    # a LoRA session (a Tinker training client) leases a share of a device, as LoRA jobs do
    assert facts.resources == (ResourceRequest(role=Role.TRAINER, shared=True, model_keys=("builtin:tiny-llama@1/default",)),
                               ResourceRequest(role=Role.ROLLOUT, shared=True, model_keys=("builtin:tiny-llama@1/default",)))
    assert facts.plan.training.max_retries == 0  # unset max_retries means 2 for the other types
    assert defaults.MAX_RETRIES == 2


def test_a_session_may_set_its_seed_micro_batch_and_zero_retries_and_needs_no_learning_rate() -> None:
    spec = session_spec()
    spec.training.seed = 7
    spec.training.max_tokens_per_micro_batch = 2048
    spec.training.max_retries = 0
    spec.resources.add(role=TRAINER, device_count=2)
    facts = facts_from_spec(spec)
    assert facts.plan.policy.optimizer is None and facts.plan.training.max_retries == 0


def _without_model(spec: job_pb2.JobSpec) -> None:
    spec.policy.ClearField("model")


def _without_adaptation(spec: job_pb2.JobSpec) -> None:
    spec.policy.ClearField("adaptation")


def _two_agents(spec: job_pb2.JobSpec) -> None:
    agent = job_pb2.AgentSpec()
    agent.CopyFrom(spec.policy)
    spec.ClearField("policy")
    for name in ("a", "b"):
        spec.agents.add().CopyFrom(agent)
        spec.agents[-1].agent_id = name


REFUSALS = {
    "spec.policy.model": _without_model,
    "spec.policy.adaptation": _without_adaptation,
    "spec.policy.frozen": lambda spec: setattr(spec.policy, "frozen", True),
    "spec.agents": _two_agents,
    "spec.environment": lambda spec: spec.environment.CopyFrom(environment_pb2.EnvironmentReference(env_name="math")),
    "spec.dataset": lambda spec: setattr(spec.dataset, "path", "chat.jsonl"),
    "spec.inference": lambda spec: setattr(spec.inference, "output_path", "out.jsonl"),
    "spec.async": lambda spec: setattr(getattr(spec, "async"), "max_staleness", 1),
    "spec.multi_agent": lambda spec: spec.multi_agent.SetInParent(),
    "spec.training.total_steps": lambda spec: setattr(spec.training, "total_steps", 10),
    "spec.training.batch_size": lambda spec: setattr(spec.training, "batch_size", 4),
    "spec.training.max_retries": lambda spec: setattr(spec.training, "max_retries", 1),
    "spec.resources[0].role": lambda spec: spec.resources.add(role=GATEWAY),
}


@pytest.mark.parametrize("field", REFUSALS)
def test_each_session_refusal_names_its_field(field: str) -> None:
    spec = session_spec()
    REFUSALS[field](spec)
    error = refusal(spec)
    assert error.field == field
    assert str(error).startswith(f"{field}: ")


def test_the_refusal_of_retries_says_why() -> None:
    spec = session_spec()
    spec.training.max_retries = 3
    assert "never retried" in str(refusal(spec)) and "got 3" in str(refusal(spec))


def test_an_environment_for_a_session_says_the_client_samples_through_the_gateway() -> None:
    spec = session_spec()
    spec.environment.env_name = "math"
    assert "must not be set for a SESSION job" in str(refusal(spec))


# --- placement --------------------------------------------------------------------------------

def _worker(worker_id: str, role: Role, devices: int = 0) -> Worker:
    from opentinker_scheduler.model import Device

    return Worker(worker_id=worker_id, role=role, address="h:1", state=WorkerState.ALIVE,
                  devices=tuple(Device(device_id=f"cpu:{i}") for i in range(devices)),
                  register_time_ms=0, last_heartbeat_time_ms=0, heartbeat_ttl_ms=1000)


def _queued(job_type: JobType) -> QueuedJob:
    return QueuedJob(job_id=f"job-{job_type.lower()}", tenant_id="acme", state=JobState.QUEUED, type=job_type,
                     resources=tuple(ResourceRequest(role=Role(r.role)) for r in defaults.RESOURCES[job_type]),
                     device_count=2, create_time_ms=0)


def _free(workers: list[Worker]) -> dict[str, list[str]]:
    return {w.worker_id: list(worker_slots(w, 4)) for w in workers}


def test_a_session_is_driven_by_a_gateway_and_the_other_types_by_a_coordinator() -> None:
    workers = [_worker("coord-1", Role.COORDINATOR), _worker("gateway-1", Role.GATEWAY),
               _worker("rollout-1", Role.ROLLOUT, 2), _worker("trainer-1", Role.TRAINER, 2)]
    session = place(job_requests(_queued(JobType.SESSION)), workers, _free(workers))
    assert [(p.request.role, p.worker.worker_id) for p in session] == [
        (Role.TRAINER, "trainer-1"), (Role.ROLLOUT, "rollout-1"), (Role.GATEWAY, "gateway-1")]
    for job_type in (JobType.RL, JobType.SFT, JobType.INFERENCE):
        plan = place(job_requests(_queued(job_type)), workers, _free(workers))
        assert plan[-1].worker.worker_id == "coord-1", job_type


def test_a_session_never_lands_on_a_coordinator_nor_an_rl_job_on_a_gateway() -> None:
    devices = [_worker("rollout-1", Role.ROLLOUT, 2), _worker("trainer-1", Role.TRAINER, 2)]
    only_coordinator = [_worker("coord-1", Role.COORDINATOR), *devices]
    assert place(job_requests(_queued(JobType.SESSION)), only_coordinator, _free(only_coordinator)) == (
        "waiting for 1 gateway slot (any device) on one worker: no alive gateway worker is registered "
        "(a SESSION job is driven by the Tinker gateway: start one)")
    only_gateway = [_worker("gateway-1", Role.GATEWAY), *devices]
    assert "no alive coordinator worker" in place(job_requests(_queued(JobType.RL)), only_gateway,
                                                  _free(only_gateway))


# --- a live Scheduler with a fake gateway -------------------------------------------------------

async def _session_world(h, clock=None) -> tuple[pb.SchedulerServiceStub, job_pb2.Job]:  # noqa: ANN001
    """Trainer, rollout, coordinator and gateway registered; tenant acme's SESSION job RUNNING."""
    await register_pool(h)
    await h.stub.RegisterWorker(register_request("gateway-1", "gateway", 0, address="127.0.0.1:8000"))
    channel, tenant = stub_for(h.address, await new_tenant(h, "acme"))
    job = (await tenant.SubmitJob(pb.SubmitJobRequest(request_id="s1", spec=session_spec()))).job
    await h.scheduler.allocator.tick()
    await channel.close()
    return (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job


def _assignment(job: job_pb2.Job, role: int) -> job_pb2.Assignment:
    return next(a for a in job.assignments if a.role == role)


def test_a_gateway_learns_its_session_job_by_heartbeat_and_finishes_it(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY, clock=ManualClock()) as h:
            job = await _session_world(h)
            assert job.state == S.STATE_RUNNING and job.tenant_id == "acme" and job.retries_left == 0
            assert sorted(a.role for a in job.assignments) == [TRAINER, ROLLOUT, GATEWAY]  # no coordinator
            tokens = {a.job_token for a in job.assignments}
            assert len(tokens) == 1 and all(tokens)  # an admin's GetJob carries the attempt's token
            assert (_assignment(job, TRAINER).worker_id, _assignment(job, ROLLOUT).worker_id) == (
                "trainer-1", "rollout-1")
            beat = await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="gateway-1"))
            assert [(a.lease.job_id, a.role, a.job_token) for a in beat.assignments] == [
                (job.job_id, GATEWAY, tokens.pop())]
            assert (await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="coord-1"))).assignments == []

            lease, token = beat.assignments[0].lease, beat.assignments[0].job_token
            finish = pb.FinishJobRequest(lease=lease, final_state=S.STATE_SUCCEEDED, message="client closed the session")
            without_token = await rpc_error(h.stub.FinishJob(finish))  # the admin key alone is not enough
            assert without_token.code() == grpc.StatusCode.PERMISSION_DENIED
            done = (await h.stub.FinishJob(finish, metadata=((JOB_TOKEN_METADATA_KEY, token),))).job
            assert done.state == S.STATE_SUCCEEDED and done.status_message == "client closed the session"
            assert await h.scheduler.jobs.leases.of_job(job.job_id) == []
            assert (await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="gateway-1"))).assignments == []

    asyncio.run(scenario())


def test_a_session_waits_for_a_gateway_and_starts_when_one_registers(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            job = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="s", spec=session_spec()))).job
            rl = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="r", spec=rl_spec()))).job
            await h.scheduler.allocator.tick()
            waiting = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            assert waiting.state == S.STATE_QUEUED
            assert "no alive gateway worker is registered" in waiting.status_message
            started_rl = (await h.stub.GetJob(pb.GetJobRequest(job_id=rl.job_id))).job
            assert started_rl.state == S.STATE_RUNNING  # the RL job behind it took the devices
            await h.stub.FinishJob(pb.FinishJobRequest(lease=_assignment(started_rl, resources_pb2.ROLE_COORDINATOR)
                                                       .lease, final_state=S.STATE_SUCCEEDED))
            await h.stub.RegisterWorker(register_request("gateway-1", "gateway", 0))
            await h.scheduler.allocator.tick()
            running = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            assert running.state == S.STATE_RUNNING and _assignment(running, GATEWAY).worker_id == "gateway-1"

    asyncio.run(scenario())


def test_a_lost_lease_fails_a_session_instead_of_requeueing_it(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY, clock=clock) as h:
            job = await _session_world(h)
            for _ in range(3):  # the trainer stops heartbeating; the others keep on, past the TTL
                clock.advance(FAST.worker_ttl_ms // 2)
                for worker in ("rollout-1", "coord-1", "gateway-1"):
                    await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id=worker))
                await h.scheduler.allocator.tick()
            failed = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            assert failed.state == S.STATE_FAILED and failed.attempt == 1
            assert failed.status_message.startswith("lost the trainer lease on worker trainer-1: no heartbeat")
            assert "never retried" in failed.status_message and "cannot be replayed" in failed.status_message
            events = await h.scheduler.jobs.events.after(job.job_id, 0)
            states = [str(e.payload.to_state) for e in events if type(e.payload).__name__ == "StateChanged"]
            assert states == ["QUEUED", "ALLOCATING", "RUNNING", "FAILED"]
            assert await h.scheduler.jobs.leases.of_job(job.job_id) == []

    asyncio.run(scenario())


def test_a_gateway_leaving_fails_its_session(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY, clock=ManualClock()) as h:
            job = await _session_world(h)
            await h.stub.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="gateway-1"))
            failed = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            assert failed.state == S.STATE_FAILED
            assert failed.status_message.startswith("lost the gateway lease on worker gateway-1: the worker "
                                                    "deregistered")

    asyncio.run(scenario())


def test_cancel_reaches_the_gateway_in_its_heartbeat(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY, clock=ManualClock()) as h:
            job = await _session_world(h)
            await h.stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id, reason="user pressed ctrl-c"))
            beat = await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="gateway-1"))
            assert list(beat.stop_job_ids) == [job.job_id] and list(beat.assignments) == []
            for worker in ("trainer-1", "rollout-1"):
                await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id=worker))
            ended = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            assert ended.state == S.STATE_CANCELLED

    asyncio.run(scenario())


def test_gateways_register_with_admin_keys_only_and_without_devices(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            channel, tenant = stub_for(h.address, await new_tenant(h, "acme"))
            async with channel:
                denied = await rpc_error(tenant.RegisterWorker(register_request("gw", "gateway", 0)))
            assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "gateways need an admin key" in denied.details()
            with_devices = await rpc_error(h.stub.RegisterWorker(register_request("gw", "gateway", 1)))
            assert with_devices.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert with_devices.details().startswith("devices: a gateway (ROLE_GATEWAY) offers no devices")
            worker = (await h.stub.RegisterWorker(register_request("gw", "gateway", 0))).worker
            assert worker.role == GATEWAY
            listed = (await h.stub.ListWorkers(pb.ListWorkersRequest(role=GATEWAY))).workers
            assert [w.worker_id for w in listed] == ["gw"]

    asyncio.run(scenario())


def test_submit_job_refuses_a_retried_session_with_invalid_argument(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            spec = session_spec()
            spec.training.max_retries = 2
            error = await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(spec=spec)))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.details().startswith("spec.training.max_retries: must be 0 or unset for a SESSION job")

    asyncio.run(scenario())
