"""Start driving one job: fetch it from the Scheduler, connect its workers, run its driver."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as scheduler_grpc
from opentinker_api.trainer.v1 import trainer_service_pb2
from opentinker_runtime.workers.assignments import replica_peers, role_assignments
from opentinker_runtime.auth.channels import JobTokenSlot, authenticated_channel
from opentinker_runtime.auth.job_tokens import job_token_of
from opentinker_runtime.auth.tenant_paths import DEFAULT_TENANT_DATA_DIR, TenantAreas
from opentinker_runtime.jobplan import JobKind, JobPlan, PolicyPlan, resolve_job_plan
from opentinker_coordinator.driver import job_plans
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.driver.env_outages import OutageBudget
from opentinker_coordinator.adapters.envhost_resolution import resolve_envhosts, scheduler_envhosts
from opentinker_coordinator.driver.inference_driver import InferencePorts, run_inference
from opentinker_coordinator.adapters.job_paths import confine_plan_paths
from opentinker_coordinator.driver.ma_driver import AgentFailed, AgentPorts, MultiAgentPorts, run_multi_agent
from opentinker_coordinator.adapters.remote import (
    RemoteRollout,
    RemoteTrainer,
    RemoteWeightSync,
    RolloutPolicy,
    SchedulerReporter,
    TrainerSession,
    request_prefix,
)
from opentinker_coordinator.adapters.retries import CallGuard, RetryBudget, WorkerLost
from opentinker_coordinator.driver.rl_driver import RlPorts, StopRequested, run_rl
from opentinker_coordinator.runs import RunState, RunStatus
from opentinker_coordinator.driver.sft_driver import SftPorts, run_sft

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class LaunchConfig:
    scheduler_address: str
    trainer_address: str
    """Used when the job's assignments name no trainer address."""
    rollout_address: str
    checkpoint_dir: Path
    """Shared checkpoint root (tokenizers of checkpoint models for SFT data)."""
    api_key: str = ""
    """Sent on every call to the Scheduler, Trainer and Rollout (OPENTINKER_API_KEY)."""
    tenant_areas: TenantAreas = TenantAreas(root=Path(DEFAULT_TENANT_DATA_DIR))
    """Where a job's relative paths resolve (its tenant's area) and the shared model directory."""
    coordinator_address: str = ""
    """Where Rollout workers reach this Coordinator to play multi-agent matches."""
    worker_retry: RetryBudget = RetryBudget()
    """Retries of Trainer and Rollout calls through UNAVAILABLE."""
    scheduler_retry: RetryBudget = RetryBudget(seconds=120.0)
    """Retries of reports to the Scheduler through UNAVAILABLE (its or Redis's restart)."""
    requeue_wait_seconds: float = 60.0
    """After a worker is lost, how long to wait for the Scheduler to re-queue the job."""
    env_outage: OutageBudget = OutageBudget()
    """How long a batch or evaluation waits out an unreachable EnvHost."""


def assignment_for(job: job_pb2.Job, role: int) -> job_pb2.Assignment | None:
    """The job's assignment of `role`; of several (Trainer devices leased across workers), the
    first of `role_assignments`: rank 0's."""
    return next(iter(role_assignments(job, role)), None)


def lease_for(job: job_pb2.Job, role: int, fallback: resources_pb2.LeaseContext) -> resources_pb2.LeaseContext:
    assignment = assignment_for(job, role)
    return assignment.lease if assignment and assignment.lease.job_id else fallback


def address_for(job: job_pb2.Job, role: int, default: str) -> str:
    assignment = assignment_for(job, role)
    return assignment.address if assignment and assignment.address else default


def trainer_device_ids(job: job_pb2.Job) -> tuple[str, ...]:
    """The Trainer devices the Scheduler leased the job (several = data-parallel)."""
    assignment = assignment_for(job, resources_pb2.ROLE_TRAINER)
    return tuple(assignment.device_ids) if assignment else ()


def trainer_peers(job: job_pb2.Job) -> tuple[trainer_service_pb2.ReplicaPeer, ...]:
    """The job's Trainer devices on workers other than rank 0's (a lease across workers)."""
    return tuple(replica_peers(role_assignments(job, resources_pb2.ROLE_TRAINER)))


def trainer_session(job: job_pb2.Job, plan: JobPlan, policy: PolicyPlan) -> TrainerSession:
    """The Trainer session of `policy` (the job's, or one agent's) on the devices the job was leased."""
    return TrainerSession(request_prefix=request_prefix(job.job_id, policy.agent_id), policy=policy,
                          seed=plan.training.seed, max_tokens_per_micro_batch=plan.training.max_tokens_per_micro_batch,
                          device_ids=trainer_device_ids(job), peers=trainer_peers(job))


@dataclass(frozen=True, kw_only=True)
class AgentChannels:
    """The channels a multi-agent job's agents share, and the retries of their Trainer calls."""

    trainer: grpc.aio.Channel
    rollout: grpc.aio.Channel
    trainer_guard: CallGuard


class JobLauncher:
    """The RunRegistry's launcher: one call drives one job to its end."""

    def __init__(self, config: LaunchConfig, protocol: AgentProtocol | None = None,
                 job_tokens: dict[str, str] | None = None) -> None:
        self.config = config
        self.protocol = protocol
        self.job_tokens = job_tokens if job_tokens is not None else {}
        """job id -> token, for the matches this Coordinator hosts on an EnvHost (multi-agent)."""

    async def __call__(self, run: RunState) -> None:
        job_token = JobTokenSlot()  # the attempt's token, in GetJob's answer to our admin key
        async with authenticated_channel(self.config.scheduler_address, self.config.api_key,
                                         job_token=job_token) as scheduler:
            guard = CallGuard(peer="scheduler", budget=self.config.scheduler_retry, stop=run.stop)
            request = scheduler_pb.GetJobRequest(job_id=run.job_id)
            job = (await guard.call("GetJob", lambda: scheduler_grpc.SchedulerServiceStub(scheduler).GetJob(
                request))).job
            job_token.set(job_token_of(job))
            own_lease = lease_for(job, resources_pb2.ROLE_COORDINATOR, resources_pb2.LeaseContext(
                job_id=job.job_id, fencing_token=run.fencing_token))
            reporter = SchedulerReporter(scheduler, own_lease, run, guard)
            await self._drive_reporting_failure(job, run, reporter)

    async def _drive_reporting_failure(self, job: job_pb2.Job, run: RunState, reporter: SchedulerReporter) -> None:
        try:
            try:
                await self._drive(job, await self._plan(job, reporter), run, reporter)
            except WorkerLost as lost:
                await _pause_until_requeued(run, reporter, lost.role, lost, self.config.requeue_wait_seconds)
            run.end(RunStatus.FINISHED, "succeeded")
        except StopRequested:
            run.end(RunStatus.FINISHED, "stopped")
            log.info("run_stopped", job_id=job.job_id)
        except Exception as error:  # noqa: BLE001 - report the failure to the Scheduler, then record it
            if run.stop.is_set():  # cancelled: the Scheduler already ended the job and refuses our lease
                run.end(RunStatus.FINISHED, "stopped")
                log.info("run_stopped", job_id=job.job_id, last_error=_failure_message(error))
                return
            message = _failure_message(error)
            log.exception("run_failed", job_id=job.job_id, error=message)
            with contextlib.suppress(grpc.RpcError, StopRequested):  # stopped while retrying: nothing to tell
                await reporter.log("error", message)
                await reporter.finish(succeeded=False, message=message)
            run.end(RunStatus.FAILED, message)

    async def _plan(self, job: job_pb2.Job, reporter: SchedulerReporter) -> JobPlan:
        """The job's spec resolved once (the same plan the Scheduler checked at SubmitJob), its named
        EnvHosts given their current addresses. A SESSION job is refused: it is the gateway's."""
        plan = resolve_job_plan(job.spec, job_id=job.job_id)
        job_plans.check_driven_here(plan.kind)
        return await resolve_envhosts(plan, job.tenant_id, scheduler_envhosts(reporter.stub, reporter.guard.call))

    async def _drive(self, job: job_pb2.Job, plan: JobPlan, run: RunState, reporter: SchedulerReporter) -> None:
        shown_output = plan.inference.output_path if plan.inference else ""  # as its tenant knows it
        plan = confine_plan_paths(plan, job.tenant_id, self.config.tenant_areas)  # before anything opens a path
        if plan.agents:
            await self._drive_multi_agent(job, plan, run, reporter)
            return
        async with self._channel(job, resources_pb2.ROLE_TRAINER, self.config.trainer_address) as trainer_channel, \
                self._channel(job, resources_pb2.ROLE_ROLLOUT, self.config.rollout_address) as rollout_channel:
            trainer = None if plan.policy.optimizer is None else RemoteTrainer(  # an INFERENCE job trains nothing
                trainer_channel, trainer_session(job, plan, plan.policy),
                lease_for(job, resources_pb2.ROLE_TRAINER, reporter.lease), guard=self._guard("trainer", run, reporter))
            rollout = RemoteRollout(rollout_channel, RolloutPolicy(request_prefix=job.job_id, policy=plan.policy,
                                                                   environment=plan.environment),
                                    lease_for(job, resources_pb2.ROLE_ROLLOUT, reporter.lease),
                                    guard=self._guard("rollout", run, reporter))
            try:
                await self._run_single(job, plan, shown_output, trainer, rollout, run, reporter)
            finally:
                await _close_quietly(*[port for port in (trainer, rollout) if port])

    async def _run_single(self, job: job_pb2.Job, plan: JobPlan, shown_output: str, trainer: RemoteTrainer | None,
                          rollout: RemoteRollout, run: RunState, reporter: SchedulerReporter) -> None:
        """The driver of a single-policy job (check_driven_here refused every kind but these three)."""
        if plan.kind is JobKind.RL:
            ports = RlPorts(trainer=trainer, rollout=rollout, weights=RemoteWeightSync(trainer, rollout),
                            reporter=reporter, stop=run.stop)
            await run_rl(dataclasses.replace(job_plans.rl_plan(job, plan), env_outage=self.config.env_outage), ports)
        elif plan.kind is JobKind.SFT:
            from opentinker_coordinator.driver.sft_data import load_sft_datums  # torch-free but heavy import

            examples = load_sft_datums(plan.dataset, plan.policy.model, self.config.checkpoint_dir)
            await run_sft(job_plans.sft_plan(job, plan), SftPorts(trainer=trainer, reporter=reporter, stop=run.stop),
                          examples)
        else:
            await run_inference(job_plans.inference_plan(job, plan, shown_output),
                                InferencePorts(rollout=rollout, reporter=reporter, stop=run.stop))

    async def _drive_multi_agent(self, job: job_pb2.Job, plan: JobPlan, run: RunState,
                                 reporter: SchedulerReporter) -> None:
        if self.protocol is None:
            raise job_plans.UnsupportedJob("this Coordinator hosts no Agent Protocol; multi-agent jobs need one")
        driver_plan = dataclasses.replace(job_plans.multi_agent_plan(job, plan, run.fencing_token),
                                          env_outage=self.config.env_outage)
        if token := job_token_of(job):
            self.job_tokens[job.job_id] = token  # the matches' EnvHost calls carry it
        async with self._channel(job, resources_pb2.ROLE_TRAINER, self.config.trainer_address) as trainer_channel, \
                self._channel(job, resources_pb2.ROLE_ROLLOUT, self.config.rollout_address) as rollout_channel:
            channels = AgentChannels(trainer=trainer_channel, rollout=rollout_channel,
                                     trainer_guard=self._guard("trainer", run, reporter))
            agents = {agent.agent_id: self._agent_ports(job, plan, agent, reporter, channels) for agent in plan.agents}
            ports = MultiAgentPorts(agents=agents, host=self.protocol, reporter=reporter, stop=run.stop)
            try:
                await run_multi_agent(driver_plan, ports)
            except AgentFailed as failed:
                if not _worker_lost(failed.cause):
                    raise
                await _pause_until_requeued(run, reporter, f"agent {failed.agent_id!r}", failed,
                                            driver_plan.barrier_timeout_s)
            finally:
                await _close_quietly(*[port for own in agents.values() for port in (own.trainer, own.rollout) if port])

    def _agent_ports(self, job: job_pb2.Job, plan: JobPlan, agent: PolicyPlan, reporter: SchedulerReporter,
                     channels: AgentChannels) -> AgentPorts:
        prefix = request_prefix(job.job_id, agent.agent_id)
        rollout = RemoteRollout(channels.rollout, RolloutPolicy(
            request_prefix=prefix, policy=agent, eval_environment=plan.multi_agent.eval_environment,
            coordinator_address=self.config.coordinator_address),
            lease_for(job, resources_pb2.ROLE_ROLLOUT, reporter.lease))
        if agent.frozen:
            return AgentPorts(rollout=rollout)
        trainer = RemoteTrainer(channels.trainer, trainer_session(job, plan, agent),
                                lease_for(job, resources_pb2.ROLE_TRAINER, reporter.lease),
                                guard=channels.trainer_guard)
        return AgentPorts(rollout=rollout, trainer=trainer, weights=RemoteWeightSync(trainer, rollout))

    def _guard(self, peer: str, run: RunState, reporter: SchedulerReporter) -> CallGuard:
        return CallGuard(peer=peer, budget=self.config.worker_retry, stop=run.stop, notify=reporter.log)

    def _channel(self, job: job_pb2.Job, role: int, default: str) -> grpc.aio.Channel:
        return authenticated_channel(address_for(job, role, default), self.config.api_key, job_token=job_token_of(job),
                                     options=[("grpc.max_receive_message_length", 64 << 20)])


def _worker_lost(error: BaseException) -> bool:
    """An agent's Trainer or Rollout went away (killed, restarted, unreachable)."""
    if isinstance(error, WorkerLost):
        return True
    return isinstance(error, grpc.aio.AioRpcError) and error.code() == grpc.StatusCode.UNAVAILABLE


async def _pause_until_requeued(run: RunState, reporter: SchedulerReporter, who: str,
                                failed: AgentFailed | WorkerLost, timeout_s: float) -> None:
    """The run stopped where it was; wait for the Scheduler to notice the lost worker and re-queue
    the job (the new attempt resumes from the last checkpoint and supersedes this run), or fail
    after `timeout_s`."""
    cause = failed.cause if isinstance(failed, AgentFailed) else failed
    message = (f"paused: {who} lost its worker ({_failure_message(cause)}); waiting up to {timeout_s:g} s "
               "for the Scheduler to re-queue the job from its last checkpoint")
    run.pause(message)
    log.warning("run_paused", job_id=run.job_id, who=who, error=str(cause))
    with contextlib.suppress(grpc.RpcError):
        await reporter.log("warning", message)
    try:
        await asyncio.wait_for(run.stop.wait(), timeout_s)
    except TimeoutError:
        raise failed from None
    raise StopRequested()


async def _close_quietly(*ports) -> None:
    for port in ports:
        with contextlib.suppress(grpc.RpcError):
            await port.close()


def _failure_message(error: BaseException) -> str:
    if isinstance(error, AgentFailed):
        return f"agent {error.agent_id!r} failed: {_failure_message(error.cause)}"
    if isinstance(error, WorkerLost):
        return f"{error.role} lost: {_failure_message(error.cause)}"
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}"
