"""A job's plan (opentinker_runtime.jobplan, every default applied) and its run facts (id, the
checkpoint it resumes from, the attempt) as the driver's plans. Values are copied: nothing is
defaulted here."""

from __future__ import annotations

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.jobplan.plan import EnvironmentPlan, InFlight, JobKind, JobPlan, PolicyPlan
from opentinker_coordinator.driver.advantages import Estimator
from opentinker_coordinator.driver.pairings import Pairing
from opentinker_coordinator.driver.plans import (
    AgentPlan,
    InferencePlan,
    MultiAgentPlan,
    MultiAgentResume,
    RlPlan,
    SftPlan,
)
from opentinker_coordinator.driver.staleness import AsyncSettings
from opentinker_coordinator.protocol.seated_environment import MatchEnvironmentRef
from opentinker_coordinator.types import CheckpointRef


class UnsupportedJob(ValueError):
    """The spec asks for something this coordinator cannot drive."""


def check_driven_here(kind: JobKind) -> None:
    """UnsupportedJob for a SESSION job: the gateway's (the Scheduler places it on a ROLE_GATEWAY
    worker; reaching a Coordinator is a bug)."""
    if kind is JobKind.SESSION:
        raise UnsupportedJob("spec.type: a JOB_TYPE_SESSION job is driven by the Tinker gateway (a ROLE_GATEWAY "
                             "worker), never by a Coordinator; refusing it")


def rl_plan(job: job_pb2.Job, plan: JobPlan) -> RlPlan:
    training, advantage = plan.training, plan.policy.advantage
    return RlPlan(
        job_id=job.job_id, total_steps=training.total_steps, batch_size=training.batch_size,
        group_size=training.group_size, eval_every_steps=training.eval_every_steps,
        eval_episodes=training.eval_episodes, checkpoint_every_steps=training.checkpoint_every_steps,
        seed=training.seed, estimator=Estimator(advantage.estimator), normalize_by_std=advantage.normalize_by_std,
        gamma=advantage.gamma, resume=resume_point(job), asynchrony=async_settings(plan))


def async_settings(plan: JobPlan) -> AsyncSettings:
    asynchrony = plan.asynchrony
    return AsyncSettings(max_staleness=asynchrony.max_staleness,
                         finish_on_old_weights=asynchrony.in_flight is InFlight.FINISH_ON_OLD_WEIGHTS)


def agent_plan(policy: PolicyPlan) -> AgentPlan:
    """A frozen agent never learns: it has no advantage estimator of its own."""
    if policy.advantage is None:
        return AgentPlan(agent_id=policy.agent_id, learns=False)
    advantage = policy.advantage
    return AgentPlan(agent_id=policy.agent_id, learns=True, estimator=Estimator(advantage.estimator),
                     normalize_by_std=advantage.normalize_by_std, gamma=advantage.gamma)


def match_environment(environment: EnvironmentPlan) -> MatchEnvironmentRef:
    return MatchEnvironmentRef(env_name=environment.env_name, config=dict(environment.config),
                               envhost_address=environment.envhost_address)


def multi_agent_plan(job: job_pb2.Job, plan: JobPlan, attempt_token: int) -> MultiAgentPlan:
    training, league = plan.training, plan.multi_agent
    return MultiAgentPlan(
        job_id=job.job_id, scope=f"{job.job_id}/attempt-{attempt_token}",
        agents=tuple(agent_plan(agent) for agent in plan.agents), environment=match_environment(plan.environment),
        pairing=Pairing(league.pairing), total_steps=training.total_steps, batch_size=training.batch_size,
        group_size=training.group_size, eval_every_steps=training.eval_every_steps,
        eval_episodes=training.eval_episodes,
        evaluates_alone=bool(league.eval_environment and league.eval_environment.env_name),
        checkpoint_every_steps=training.checkpoint_every_steps, seed=training.seed, elo_k=league.elo_k,
        barrier_timeout_s=league.barrier_timeout_s, resume=multi_agent_resume(job), asynchrony=async_settings(plan))


def multi_agent_resume(job: job_pb2.Job) -> MultiAgentResume | None:
    """Every learning agent's checkpoint of the job's last common checkpoint (None: start fresh)."""
    resume = job.resume_from
    if not job.HasField("resume_from") or not resume.agent_checkpoint_ids:
        return None
    return MultiAgentResume(step=resume.step, checkpoint_ids=dict(resume.agent_checkpoint_ids),
                            ratings=dict(resume.driver_state))


def sft_plan(job: job_pb2.Job, plan: JobPlan) -> SftPlan:
    training = plan.training
    return SftPlan(job_id=job.job_id, total_steps=training.total_steps, batch_size=training.batch_size,
                   checkpoint_every_steps=training.checkpoint_every_steps, seed=training.seed,
                   target_loss=training.target_loss, resume=resume_point(job))


def resume_point(job: job_pb2.Job) -> CheckpointRef | None:
    """The checkpoint a re-queued job continues from (None on a fresh start)."""
    if not job.HasField("resume_from") or not job.resume_from.checkpoint_id:
        return None
    return CheckpointRef(checkpoint_id=job.resume_from.checkpoint_id, step=job.resume_from.step)


def inference_plan(job: job_pb2.Job, plan: JobPlan, shown_output: str) -> InferencePlan:
    """`plan` with its paths confined (`confine_plan_paths`): its output path is absolute.
    `shown_output`: the output path as the job's tenant knows it."""
    return InferencePlan(job_id=job.job_id, num_episodes=plan.inference.num_episodes,
                         output_path=plan.inference.output_path, seed=plan.training.seed, shown_output=shown_output)
