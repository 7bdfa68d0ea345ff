"""The RL phase loop: rollout -> advantages -> update -> weight sync -> eval/checkpoint.

One call of `run_rl` drives a whole job through its ports; every phase reports progress,
every step reports metrics (reward, accuracy, loss, KL, tokens/s, time per phase).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from opentinker_coordinator.driver import episodes
from opentinker_coordinator.driver.datums import rl_datums
from opentinker_coordinator.driver.env_outages import collect_until_usable, score_or_skip, trainable
from opentinker_coordinator.driver.episode_metrics import episode_metrics
from opentinker_coordinator.metrics import count_step, observe_phase
from opentinker_coordinator.driver.plans import RlPlan
from opentinker_coordinator.driver.ports import ReporterPort, RolloutPort, TrainerPort, WeightSyncPort
from opentinker_coordinator.driver.resume import resume_step
from opentinker_coordinator.types import Trajectory

log = structlog.get_logger(__name__)

class StopRequested(Exception):
    """The job was cancelled or its lease lost; the driver stops at a phase boundary."""


@dataclass(kw_only=True)
class RlPorts:
    trainer: TrainerPort
    rollout: RolloutPort
    weights: WeightSyncPort
    reporter: ReporterPort
    stop: asyncio.Event


async def collect(ports: RlPorts, requests, group_size: int, *, evaluation: bool) -> list[Trajectory]:
    trajectories = []
    async for trajectory in ports.rollout.run_episodes(requests, group_size, evaluation=evaluation):
        trajectories.append(trajectory)
    return trajectories


def check_stop(ports: RlPorts) -> None:
    if ports.stop.is_set():
        raise StopRequested()


async def rollout_phase(plan: RlPlan, ports: RlPorts, step: int) -> tuple[list[Trajectory], dict]:
    """The step's episodes. A batch with nothing to train on is collected again (env_outages.py:
    an outage is waited out within the job's outage budget, a broken game tried a few times):
    an optimizer step is never taken, nor skipped, for want of data. Failed episodes of every
    collection are counted in `env_errors`."""
    await ports.reporter.progress(phase="ROLLOUT", step=step, total_steps=plan.total_steps)
    started = time.perf_counter()
    requests = episodes.train_requests(step, plan.batch_size, plan.seed)
    collected = await collect_until_usable(
        lambda: collect(ports, requests, plan.group_size, evaluation=False), usable=trainable,
        what=f"step {step + 1}", budget=plan.env_outage, tell=ports.reporter.log,
        pause=lambda seconds: _sleep_unless_stopped(ports, seconds))
    trajectories = collected.trajectories
    seconds = time.perf_counter() - started
    observe_phase("rollout", seconds)
    sampled = sum(t.sampled_tokens for t in trajectories)
    metrics = episode_metrics(trajectories) | {
        "time/rollout_s": seconds, "tokens_per_second": sampled / seconds if seconds > 0 else 0.0}
    metrics["env_errors"] += collected.failed_before
    if collected.retries:
        metrics["rollout_retries"] = float(collected.retries)
    return trajectories, metrics


async def _sleep_unless_stopped(ports: RlPorts, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ports.stop.wait(), seconds)
    check_stop(ports)


async def update_phase(plan: RlPlan, ports: RlPorts, step: int, trajectories: Sequence[Trajectory]) -> dict:
    await ports.reporter.progress(phase="UPDATE", step=step, total_steps=plan.total_steps)
    started = time.perf_counter()
    datums = rl_datums(trajectories, plan.estimator, normalize_by_std=plan.normalize_by_std,
                       gamma=plan.gamma)
    metrics: dict[str, float] = {"datums": float(len(datums))}
    if datums:
        metrics |= await ports.trainer.forward_backward(datums)
    metrics |= await ports.trainer.optim_step(step + 1)
    metrics["time/update_s"] = time.perf_counter() - started
    observe_phase("update", metrics["time/update_s"])
    return metrics


async def weight_sync_phase(plan: RlPlan, ports: RlPorts, step: int) -> dict:
    await ports.reporter.progress(phase="WEIGHT_SYNC", step=step + 1, total_steps=plan.total_steps)
    started = time.perf_counter()
    version = await ports.weights.sync()
    seconds = time.perf_counter() - started
    observe_phase("weight_sync", seconds)
    return {"policy_version": float(version), "time/weight_sync_s": seconds}


async def evaluate(plan: RlPlan, ports: RlPorts, step: int) -> dict:
    """The eval metrics at `step`; none (an event says why) when its episodes stayed unusable."""
    await ports.reporter.progress(phase="EVAL", step=step, total_steps=plan.total_steps)
    started = time.perf_counter()
    requests = episodes.eval_requests(plan.eval_episodes, plan.seed)
    trajectories = await score_or_skip(
        lambda: collect(ports, requests, 1, evaluation=True), what=f"the evaluation at step {step}",
        budget=plan.env_outage, tell=ports.reporter.log, pause=lambda seconds: _sleep_unless_stopped(ports, seconds))
    if trajectories is None:
        return {}
    seconds = time.perf_counter() - started
    observe_phase("eval", seconds)
    return episode_metrics(trajectories, prefix="eval/") | {"time/eval_s": seconds}


def due(every: int, step: int) -> bool:
    return every > 0 and step % every == 0


async def rl_step(plan: RlPlan, ports: RlPorts, step: int) -> dict:
    """One optimizer step; returns its metrics (reported by the caller)."""
    trajectories, metrics = await rollout_phase(plan, ports, step)
    check_stop(ports)
    metrics |= await update_phase(plan, ports, step, trajectories)
    check_stop(ports)
    metrics |= await weight_sync_phase(plan, ports, step)
    if due(plan.eval_every_steps, step + 1) and step + 1 < plan.total_steps:
        metrics |= await evaluate(plan, ports, step + 1)
    return metrics


async def run_rl(plan: RlPlan, ports: RlPorts) -> None:
    """Drive the job to its last step, evaluate, save the final policy, report SUCCEEDED."""
    await ports.reporter.progress(phase="SETUP", step=0, total_steps=plan.total_steps)
    await asyncio.gather(ports.trainer.open(), ports.rollout.open())
    start = await resume_step(plan.resume, ports.trainer, ports.reporter)
    if start:
        await ports.weights.sync()  # Rollout samples from the restored policy
    elif initial := await evaluate(plan, ports, 0):
        await ports.reporter.metrics(0, initial)
    for step in range(start, plan.total_steps):
        check_stop(ports)
        started = time.perf_counter()
        metrics = await rl_step(plan, ports, step)
        count_step("rl", time.perf_counter() - started)
        # metrics before the checkpoint: an attempt that dies in between resumes from the previous
        # checkpoint and reports this step again, instead of skipping a step it never reported
        await ports.reporter.metrics(step + 1, metrics)
        log.info("rl_step", job_id=plan.job_id, step=step + 1, **_headline(metrics))
        if due(plan.checkpoint_every_steps, step + 1):
            await ports.reporter.checkpoint(await ports.trainer.save_checkpoint(f"step-{step + 1}", final=False))
    if final := await evaluate(plan, ports, plan.total_steps):
        await ports.reporter.metrics(plan.total_steps, final)
    await ports.reporter.checkpoint(await ports.trainer.save_checkpoint("final", final=True))
    await ports.reporter.progress(phase="FINISHED", step=plan.total_steps, total_steps=plan.total_steps)
    await ports.reporter.finish(succeeded=True, message=_summary(final))


def _headline(metrics: dict) -> dict:
    keys = ("reward/mean", "accuracy", "loss", "eval/accuracy")
    return {k.replace("/", "_"): round(metrics[k], 4) for k in keys if k in metrics}


def _summary(final: dict) -> str:
    accuracy = final.get("eval/accuracy")
    return f"eval accuracy {accuracy:.3f}" if accuracy is not None else "finished"
