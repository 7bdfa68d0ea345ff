"""A multi-agent RL job: one agent pipeline (pipeline.py) per agent, playing in one league.

Each agent has its own policy on the Rollout and (unless frozen) its own Trainer session and
optimiser, and runs the same pipeline as a single-agent job; its batches are its seats of the
step's matches (hosted by this Coordinator's Agent Protocol; the Rollout's FSM joins, awaits
its turns and submits actions), its advantages are computed over its own trajectories only.
A synchronous job (max_staleness 0) keeps the agents in lockstep with barriers:

    ROLLOUT -> barrier (ROLLOUT, k) -> UPDATE -> barrier (UPDATE, k) -> WEIGHT_SYNC
    -> barrier (WEIGHT_SYNC, k): no agent plays step k+1 against a half-updated opponent

In an asynchronous job the barriers become the staleness bound: each agent plays step s once
its own weights hold >= s - max_staleness steps, and a match waits for its opponents' pipelines.
Every step each agent reports its metrics (its episodes, its matches' results, Elo) with its
agent id, and on checkpoint steps saves its training state; once every learning agent saved,
the job's common checkpoint is reported (a re-queued attempt resumes every agent from it). An
agent whose pipeline fails is declared lost: the others' barriers and matches break at once
(AgentLost) instead of waiting forever, and the run ends with `AgentFailed` naming the agent.
"""

from __future__ import annotations

import asyncio

import structlog

from opentinker_coordinator.driver import elo
from opentinker_coordinator.driver.env_outages import EnvironmentBroken, EnvironmentUnavailable
from opentinker_coordinator.driver.league import (
    AgentPorts,
    League,
    MatchRolloutPort,
    MultiAgentPorts,
    MultiAgentReporter,
    evaluate_alone,
)
from opentinker_coordinator.driver.pipeline import AgentPipeline, Learner, PipelineSettings, StopRequested
from opentinker_coordinator.driver.plans import MultiAgentPlan
from opentinker_coordinator.driver.staleness import PolicyClock
from opentinker_coordinator.protocol.protocol_errors import AgentLost
from opentinker_coordinator.types import CheckpointRef

__all__ = ["AgentFailed", "AgentPorts", "MatchRolloutPort", "MultiAgentPorts", "MultiAgentReporter",
           "run_multi_agent", "evaluate_alone"]

log = structlog.get_logger(__name__)


class AgentFailed(Exception):
    """An agent's pipeline failed; `cause` is the original error."""

    def __init__(self, agent_id: str, cause: BaseException) -> None:
        super().__init__(f"agent {agent_id!r} failed: {type(cause).__name__}: {cause}")
        self.agent_id, self.cause = agent_id, cause


def agent_pipeline(league: League, agent_id: str, start: int, resumed: bool) -> AgentPipeline:
    plan = league.plan
    agent = next(a for a in plan.agents if a.agent_id == agent_id)
    own = league.ports.agents[agent_id]
    learner = Learner(trainer=own.trainer, weights=own.weights) if own.trainer is not None else None
    settings = PipelineSettings(job_id=plan.job_id, total_steps=plan.total_steps, eval_every_steps=plan.eval_every_steps,
                                checkpoint_every_steps=plan.checkpoint_every_steps, asynchrony=plan.asynchrony)
    clock = PolicyClock(start, None if resumed and learner is not None else 0)
    return AgentPipeline(agent=agent, team=league, learner=learner, settings=settings, stop=league.ports.stop,
                         clock=clock)


async def _guarded(pipeline: AgentPipeline, league: League, start: int) -> None:
    """Run one pipeline; if it fails (or stops), declare its agent lost so nobody waits for it."""
    try:
        await pipeline.run(start)
    except AgentLost:
        raise
    except BaseException as error:
        await league.ports.host.agent_lost(league.plan.scope, pipeline.agent_id, f"{type(error).__name__}: {error}")
        if isinstance(error, (StopRequested, asyncio.CancelledError)):
            raise
        raise AgentFailed(pipeline.agent_id, error) from error


async def run_pipelines(league: League, pipelines: list[AgentPipeline], start: int) -> None:
    """Every agent's pipeline to the last step; the first real failure is raised."""
    results = await asyncio.gather(*(_guarded(p, league, start) for p in pipelines), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    for kind in (StopRequested, AgentFailed, BaseException):
        first = next((e for e in errors if isinstance(e, kind)), None)
        if first is not None:
            raise first


async def _resume(plan: MultiAgentPlan, ports: MultiAgentPorts, pipelines: list[AgentPipeline]) -> int:
    if plan.resume is None:
        return 0
    for pipeline in pipelines:
        if pipeline.learner is not None:
            await pipeline.learner.trainer.load_checkpoint(plan.resume.checkpoint_ids[pipeline.agent_id])
            await pipeline.clock.synced(await pipeline.learner.weights.sync(), plan.resume.step)
    await ports.reporter.log("WARNING", f"resumed every agent from the common checkpoint of step "
                                        f"{plan.resume.step}")
    return plan.resume.step


async def _final(plan: MultiAgentPlan, ports: MultiAgentPorts, league: League, pipelines: list[AgentPipeline]) -> str:
    """Evaluate each agent, save every learner; an evaluation that failed fails the job once the
    learners are saved."""
    try:
        for pipeline in pipelines:
            await pipeline.rollout_has(plan.total_steps)
            final = await evaluate_alone(plan, ports, pipeline.agent_id, plan.total_steps, league.env_errors)
            if final:
                await ports.reporter.metrics(plan.total_steps, final, agent_id=pipeline.agent_id)
    except (EnvironmentBroken, EnvironmentUnavailable):
        await _save_learners(plan, ports, league)
        raise
    await _save_learners(plan, ports, league)
    await league.env_errors.tell_summary()
    return "elo " + ", ".join(f"{agent} {rating:.0f}" for agent, rating in league.ratings.items())


async def _save_learners(plan: MultiAgentPlan, ports: MultiAgentPorts, league: League) -> None:
    refs = {a.agent_id: await ports.agents[a.agent_id].trainer.save_checkpoint(f"final-{a.agent_id}", final=True)
            for a in plan.agents if a.learns}
    if refs:
        first = next(iter(refs.values()))
        await ports.reporter.checkpoint(CheckpointRef(checkpoint_id=first.checkpoint_id, step=plan.total_steps),
                                        agents={agent: ref.checkpoint_id for agent, ref in refs.items()},
                                        driver_state={f"elo/{a}": r for a, r in league.ratings.items()})


async def run_multi_agent(plan: MultiAgentPlan, ports: MultiAgentPorts) -> None:
    """Drive a multi-agent job to its last step, evaluate, save every learner, report SUCCEEDED."""
    await ports.reporter.progress(phase="SETUP", step=0, total_steps=plan.total_steps)
    ports.host.register_job(plan.scope, [a.agent_id for a in plan.agents])
    try:
        await asyncio.gather(*(_open(own) for own in ports.agents.values()))
        seats = await ports.host.seats_of(plan.environment, plan.scope)
        ratings = {a.agent_id: elo.INITIAL_RATING for a in plan.agents}
        if plan.resume is not None:
            ratings |= {a: plan.resume.ratings[f"elo/{a}"] for a in ratings if f"elo/{a}" in plan.resume.ratings}
        league = League(plan, ports, seats, ratings)
        start = plan.resume.step if plan.resume is not None else 0
        pipelines = [agent_pipeline(league, a.agent_id, start, plan.resume is not None) for a in plan.agents]
        await _resume(plan, ports, pipelines)
        if not start:
            for agent in plan.agents:
                initial = await evaluate_alone(plan, ports, agent.agent_id, 0, league.env_errors)
                if initial:
                    await ports.reporter.metrics(0, initial, agent_id=agent.agent_id)
        await run_pipelines(league, pipelines, start)
        summary = await _final(plan, ports, league, pipelines)
    finally:
        ports.host.forget_job(plan.scope)
    await ports.reporter.progress(phase="FINISHED", step=plan.total_steps, total_steps=plan.total_steps)
    await ports.reporter.finish(succeeded=True, message=summary)


async def _open(own: AgentPorts) -> None:
    await own.rollout.open()
    if own.trainer is not None:
        await own.trainer.open()
