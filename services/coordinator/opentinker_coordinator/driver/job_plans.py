"""Read a job's spec (protobuf) into the driver's plan (domain), with documented defaults."""

from __future__ import annotations

from google.protobuf import json_format

from opentinker_api.common.v1 import algorithm_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_coordinator.driver.advantages import Estimator
from opentinker_coordinator.driver.elo import DEFAULT_K
from opentinker_coordinator.driver.pairings import Pairing
from opentinker_coordinator.driver.plans import (
    AgentPlan,
    InferencePlan,
    MultiAgentPlan,
    MultiAgentResume,
    RlPlan,
    SftPlan,
)
from opentinker_coordinator.protocol.seated_environment import MatchEnvironmentRef
from opentinker_coordinator.driver.staleness import AsyncSettings
from opentinker_coordinator.types import CheckpointRef

DEFAULT_BATCH_SIZE = 8
DEFAULT_GROUP_SIZE = 8
DEFAULT_EVAL_EPISODES = 32
DEFAULT_INFERENCE_EPISODES = 32

ESTIMATORS = {
    algorithm_pb2.ADVANTAGE_ESTIMATOR_UNSPECIFIED: Estimator.GRPO,
    algorithm_pb2.ADVANTAGE_ESTIMATOR_GRPO: Estimator.GRPO,
    algorithm_pb2.ADVANTAGE_ESTIMATOR_RLOO: Estimator.RLOO,
    algorithm_pb2.ADVANTAGE_ESTIMATOR_REINFORCE_PLUS_PLUS: Estimator.REINFORCE_PLUS_PLUS,
    algorithm_pb2.ADVANTAGE_ESTIMATOR_DISCOUNTED_RETURN: Estimator.DISCOUNTED_RETURN,
}


class UnsupportedJob(ValueError):
    """The spec asks for something this coordinator cannot drive yet."""


DRIVEN_TYPES = (job_pb2.JOB_TYPE_RL, job_pb2.JOB_TYPE_SFT, job_pb2.JOB_TYPE_INFERENCE)


def check_driven_here(spec: job_pb2.JobSpec) -> None:
    """UnsupportedJob for a job type a Coordinator never drives: a SESSION job is the gateway's
    (the Scheduler places it on a ROLE_GATEWAY worker; reaching a Coordinator is a bug)."""
    if spec.type == job_pb2.JOB_TYPE_SESSION:
        raise UnsupportedJob("spec.type: a JOB_TYPE_SESSION job is driven by the Tinker gateway (a ROLE_GATEWAY "
                             "worker), never by a Coordinator; refusing it")
    if spec.type not in DRIVEN_TYPES:
        name = job_pb2.JobType.Name(spec.type) if spec.type in job_pb2.JobType.values() else str(spec.type)
        raise UnsupportedJob(f"spec.type: {name} is not a job type a Coordinator drives "
                             "(JOB_TYPE_RL, JOB_TYPE_SFT or JOB_TYPE_INFERENCE)")


def rl_plan(job: job_pb2.Job) -> RlPlan:
    training, advantage = job.spec.training, job.spec.policy.algorithm.advantage
    if advantage.estimator not in ESTIMATORS:
        name = algorithm_pb2.AdvantageEstimator.Name(advantage.estimator)
        raise UnsupportedJob(f"spec.policy.algorithm.advantage.estimator {name} is not supported yet")
    return RlPlan(
        job_id=job.job_id, total_steps=training.total_steps,
        batch_size=training.batch_size or DEFAULT_BATCH_SIZE, group_size=training.group_size or DEFAULT_GROUP_SIZE,
        eval_every_steps=training.eval_every_steps, eval_episodes=training.eval_episodes or DEFAULT_EVAL_EPISODES,
        checkpoint_every_steps=training.checkpoint_every_steps, seed=training.seed,
        estimator=ESTIMATORS[advantage.estimator], normalize_by_std=advantage.normalize_by_std,
        gamma=advantage.gamma or 1.0,
        resume=resume_point(job), asynchrony=async_settings(job.spec))


def async_settings(spec: job_pb2.JobSpec) -> AsyncSettings:
    """JobSpec.async (a Python keyword, so read with getattr); unset = synchronous."""
    config = getattr(spec, "async")
    return AsyncSettings(max_staleness=config.max_staleness,
                         finish_on_old_weights=config.in_flight != job_pb2.AsyncConfig.IN_FLIGHT_SWAP_WEIGHTS)


PAIRINGS = {
    job_pb2.MultiAgentConfig.PAIRING_UNSPECIFIED: Pairing.AUTO,
    job_pb2.MultiAgentConfig.PAIRING_FIXED_SEATS: Pairing.FIXED_SEATS,
    job_pb2.MultiAgentConfig.PAIRING_ROUND_ROBIN: Pairing.ROUND_ROBIN,
}
DEFAULT_BARRIER_TIMEOUT_S = 300.0


def agent_plan(agent: job_pb2.AgentSpec) -> AgentPlan:
    advantage = agent.algorithm.advantage
    if advantage.estimator not in ESTIMATORS:
        name = algorithm_pb2.AdvantageEstimator.Name(advantage.estimator)
        raise UnsupportedJob(f"agent {agent.agent_id}: advantage estimator {name} is not supported yet")
    return AgentPlan(agent_id=agent.agent_id, learns=not agent.frozen, estimator=ESTIMATORS[advantage.estimator],
                     normalize_by_std=advantage.normalize_by_std, gamma=advantage.gamma or 1.0)


def multi_agent_plan(job: job_pb2.Job, attempt_token: int) -> MultiAgentPlan:
    training, config = job.spec.training, job.spec.multi_agent
    environment = job.spec.environment
    return MultiAgentPlan(
        job_id=job.job_id, scope=f"{job.job_id}/attempt-{attempt_token}",
        agents=tuple(agent_plan(agent) for agent in job.spec.agents),
        environment=MatchEnvironmentRef(env_name=environment.env_name,
                                        config=json_format.MessageToDict(environment.config),
                                        envhost_address=environment.envhost_address),
        pairing=PAIRINGS.get(config.pairing, Pairing.AUTO), total_steps=training.total_steps,
        batch_size=training.batch_size or 1, group_size=training.group_size or DEFAULT_GROUP_SIZE,
        eval_every_steps=training.eval_every_steps, eval_episodes=training.eval_episodes or DEFAULT_EVAL_EPISODES,
        evaluates_alone=bool(config.eval_environment.env_name),
        checkpoint_every_steps=training.checkpoint_every_steps, seed=training.seed,
        elo_k=config.elo_k or DEFAULT_K, barrier_timeout_s=config.barrier_timeout_seconds or DEFAULT_BARRIER_TIMEOUT_S,
        resume=multi_agent_resume(job), asynchrony=async_settings(job.spec))


def multi_agent_resume(job: job_pb2.Job) -> MultiAgentResume | None:
    """Every learning agent's checkpoint of the job's last common checkpoint (None: start fresh)."""
    resume = job.resume_from
    if not job.HasField("resume_from") or not resume.agent_checkpoint_ids:
        return None
    return MultiAgentResume(step=resume.step, checkpoint_ids=dict(resume.agent_checkpoint_ids),
                            ratings=dict(resume.driver_state))


def sft_plan(job: job_pb2.Job) -> SftPlan:
    training = job.spec.training
    return SftPlan(job_id=job.job_id, total_steps=training.total_steps,
                   batch_size=training.batch_size or DEFAULT_BATCH_SIZE,
                   checkpoint_every_steps=training.checkpoint_every_steps, seed=training.seed,
                   target_loss=training.target_loss, resume=resume_point(job))


def resume_point(job: job_pb2.Job) -> CheckpointRef | None:
    """The checkpoint a re-queued job continues from (None on a fresh start)."""
    if not job.HasField("resume_from") or not job.resume_from.checkpoint_id:
        return None
    return CheckpointRef(checkpoint_id=job.resume_from.checkpoint_id, step=job.resume_from.step)


def inference_plan(job: job_pb2.Job) -> InferencePlan:
    """`job` with its paths confined (`confine_job_paths`): its output path is set and absolute."""
    inference = job.spec.inference
    return InferencePlan(job_id=job.job_id, num_episodes=inference.num_episodes or DEFAULT_INFERENCE_EPISODES,
                         output_path=inference.output_path, seed=job.spec.training.seed)
