"""A single-agent RL job: the agent pipeline (pipeline.py) with a league of one agent.

`SoloTeam` is that league: its batches are the job's episodes (`episodes.train_requests` of
(seed, step), played group_size times each; a batch with nothing to train on is collected
again within the outage budget), its barriers are trivially passed, and it reports to the job's
reporter. One call of `run_rl` drives a whole job: set-up, the baseline evaluation (or the
resume from a checkpoint), every step, the final evaluation and the final policy.

The job's environment errors go to its log once per distinct error, with the game's traceback
(`EnvErrorDigest`), and are summed up when the job ends. An evaluation whose episodes all failed
fails the job naming the cause (the final one after the trained policy is saved): a score of
episodes that could not be played would be no score.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass

from opentinker_coordinator.driver import episodes
from opentinker_coordinator.driver.env_errors import job_digest
from opentinker_coordinator.driver.env_outages import (
    EnvironmentBroken,
    EnvironmentUnavailable,
    collect_until_usable,
    evaluate_or_fail,
    trainable,
)
from opentinker_coordinator.driver.episode_metrics import accuracy_summary, episode_metrics
from opentinker_coordinator.driver.pipeline import (
    AgentPipeline,
    Collected,
    Learner,
    PipelineSettings,
    StopRequested,
    sleep_unless_stopped,
)
from opentinker_coordinator.driver.plans import AgentPlan, RlPlan
from opentinker_coordinator.driver.ports import ReporterPort, RolloutPort, TrainerPort, WeightSyncPort
from opentinker_coordinator.driver.resume import resume_step
from opentinker_coordinator.driver.samples import pick_samples
from opentinker_coordinator.driver.staleness import AsyncSettings, PolicyClock
from opentinker_coordinator.metrics import observe_phase
from opentinker_coordinator.types import CheckpointRef, Trajectory

__all__ = ["RlPorts", "StopRequested", "run_rl", "rl_step"]


@dataclass(kw_only=True)
class RlPorts:
    trainer: TrainerPort
    rollout: RolloutPort
    weights: WeightSyncPort
    reporter: ReporterPort
    stop: asyncio.Event


async def collect(ports: RlPorts, requests, group_size: int, *, evaluation: bool) -> list[Trajectory]:
    return [t async for t in ports.rollout.run_episodes(requests, group_size, evaluation=evaluation)]


class SoloTeam:
    """The league of one agent: the Team of a single-agent job's pipeline."""

    replays_batches = True

    def __init__(self, plan: RlPlan, ports: RlPorts) -> None:
        self.plan, self.ports = plan, ports
        self.env_errors = job_digest(ports.reporter.log)

    def _pause(self, seconds: float):  # noqa: ANN202
        return sleep_unless_stopped(self.ports.stop, seconds)

    async def collect(self, agent_id: str, step: int) -> Collected:
        """The step's episodes. A batch with nothing to train on is collected again
        (env_outages.py: an outage is waited out within the job's outage budget, a broken game
        tried a few times): an optimizer step is never taken, nor skipped, for want of data.
        Failed episodes of every collection are counted in `env_errors`."""
        started = time.perf_counter()
        requests = episodes.train_requests(step, self.plan.batch_size, self.plan.seed)
        collected = await collect_until_usable(
            lambda: collect(self.ports, requests, self.plan.group_size, evaluation=False), usable=trainable,
            what=f"step {step + 1}", budget=self.plan.env_outage, tell=self.ports.reporter.log, pause=self._pause,
            digest=self.env_errors)
        trajectories = collected.trajectories
        seconds = time.perf_counter() - started
        observe_phase("rollout", seconds)
        await self.ports.reporter.samples(step + 1, "train", pick_samples(trajectories))  # the step its metrics land on
        sampled = sum(t.sampled_tokens for t in trajectories)
        metrics = episode_metrics(trajectories) | {
            "time/rollout_s": seconds, "tokens_per_second": sampled / seconds if seconds > 0 else 0.0}
        metrics["env_errors"] += collected.failed_before
        if collected.retries:
            metrics["rollout_retries"] = float(collected.retries)
        return Collected(trajectories=trajectories, metrics=metrics)

    async def evaluate(self, agent_id: str, step: int) -> dict[str, float]:
        """The eval metrics at `step`; EnvironmentBroken or EnvironmentUnavailable (naming the
        cause) when its episodes stayed unusable: an evaluation that failed is no score."""
        await self.progress(agent_id, "EVAL", step)
        started = time.perf_counter()
        requests = episodes.eval_requests(self.plan.eval_episodes, self.plan.seed)
        if not requests:
            return {}
        trajectories = await evaluate_or_fail(
            lambda: collect(self.ports, requests, 1, evaluation=True), what=f"the evaluation at step {step}",
            budget=self.plan.env_outage, tell=self.ports.reporter.log, pause=self._pause, digest=self.env_errors)
        seconds = time.perf_counter() - started
        observe_phase("eval", seconds)
        await self.ports.reporter.samples(step, "eval", pick_samples(trajectories))
        return episode_metrics(trajectories, prefix="eval/") | {"time/eval_s": seconds}

    async def barrier(self, agent_id: str, phase: str, step: int) -> None:
        """Nobody else to wait for."""

    async def rollout_done(self, agent_id: str, step: int) -> None:
        """Nobody else plays this agent's episodes."""

    async def step_results(self, agent_id: str, step: int) -> dict[str, float]:
        return {}

    async def progress(self, agent_id: str, phase: str, step: int) -> None:
        await self.ports.reporter.progress(phase=phase, step=step, total_steps=self.plan.total_steps)

    async def report(self, agent_id: str, step: int, metrics: dict[str, float]) -> None:
        await self.ports.reporter.metrics(step, metrics)

    async def checkpoint(self, agent_id: str, step: int, ref: CheckpointRef, driver_state: dict[str, float]) -> None:
        if self.plan.asynchrony.synchronous:
            await self.ports.reporter.checkpoint(ref)
        else:
            await self.ports.reporter.checkpoint(ref, driver_state=driver_state)


def solo_pipeline(plan: RlPlan, ports: RlPorts, clock: PolicyClock) -> AgentPipeline:
    settings = PipelineSettings(job_id=plan.job_id, total_steps=plan.total_steps, eval_every_steps=plan.eval_every_steps,
                                checkpoint_every_steps=plan.checkpoint_every_steps, asynchrony=plan.asynchrony)
    agent = AgentPlan(agent_id="", estimator=plan.estimator, normalize_by_std=plan.normalize_by_std, gamma=plan.gamma)
    return AgentPipeline(agent=agent, team=SoloTeam(plan, ports), learner=Learner(trainer=ports.trainer,
                         weights=ports.weights), settings=settings, stop=ports.stop, clock=clock)


async def rl_step(plan: RlPlan, ports: RlPorts, step: int, rollout_version: int = 0) -> dict:
    """One synchronous optimizer step at `step`, the Rollout sampling with `rollout_version` (the
    weights of `step` steps); its metrics."""
    plan = dataclasses.replace(plan, total_steps=step + 1, eval_every_steps=0, checkpoint_every_steps=0,
                               asynchrony=AsyncSettings())
    pipeline = solo_pipeline(plan, ports, PolicyClock(step, rollout_version))
    collected = []

    async def keep(agent_id: str, at: int, metrics: dict[str, float]) -> None:
        collected.append(metrics)  # returned, not reported: the caller reports it

    pipeline.team.report = keep
    await pipeline.run(step)
    return collected[-1]


async def run_rl(plan: RlPlan, ports: RlPorts) -> None:
    """Drive the job to its last step, evaluate, save the final policy, report SUCCEEDED."""
    await ports.reporter.progress(phase="SETUP", step=0, total_steps=plan.total_steps)
    await asyncio.gather(ports.trainer.open(), ports.rollout.open())
    start = await resume_step(plan.resume, ports.trainer, ports.reporter)
    clock = PolicyClock(start, 0 if not start else None)
    pipeline = solo_pipeline(plan, ports, clock)
    if start:
        await clock.synced(await ports.weights.sync(), start)  # Rollout samples from the restored policy
    elif initial := await pipeline.team.evaluate("", 0):
        await ports.reporter.metrics(0, initial)
    await pipeline.run(start)
    await pipeline.rollout_has(plan.total_steps)
    final = await _final_evaluation(pipeline.team, ports, plan.total_steps)
    if final:
        await ports.reporter.metrics(plan.total_steps, final)
    await ports.reporter.checkpoint(await ports.trainer.save_checkpoint("final", final=True))
    await pipeline.team.env_errors.tell_summary()
    await ports.reporter.progress(phase="FINISHED", step=plan.total_steps, total_steps=plan.total_steps)
    await ports.reporter.finish(succeeded=True, message=_summary(final))


async def _final_evaluation(team: SoloTeam, ports: RlPorts, step: int) -> dict[str, float]:
    """The final evaluation; when it fails, the trained policy is saved before the job fails."""
    try:
        return await team.evaluate("", step)
    except (EnvironmentBroken, EnvironmentUnavailable):
        await ports.reporter.checkpoint(await ports.trainer.save_checkpoint("final", final=True))
        raise


def _summary(final: dict) -> str:
    measured = accuracy_summary(final)
    return f"eval {measured}" if measured is not None else "finished"
