"""The SFT loop: shuffled batches of chat examples -> cross-entropy updates -> final model.

With a target loss the loop ends early, once the mean loss over the last `LOSS_WINDOW` steps
reaches it: a warm-up that stops when the policy has learned enough for RL to take over,
whatever the seed (the step at which a small model "gets" a task varies a lot between seeds).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import structlog

from opentinker_coordinator.metrics import count_step, observe_phase
from opentinker_coordinator.driver.plans import SftPlan
from opentinker_coordinator.driver.ports import ReporterPort, TrainerPort
from opentinker_coordinator.driver.resume import resume_step
from opentinker_coordinator.driver.pipeline import StopRequested, due
from opentinker_coordinator.types import Datum

log = structlog.get_logger(__name__)

LOSS_WINDOW = 10


@dataclass(kw_only=True)
class SftPorts:
    trainer: TrainerPort
    reporter: ReporterPort
    stop: asyncio.Event


def batches(examples: Sequence[Datum], batch_size: int, seed: int) -> Iterator[list[Datum]]:
    """Endless batches: each epoch a fresh seeded shuffle; the last short batch is kept."""
    rng = random.Random(seed)
    while True:
        order = list(range(len(examples)))
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            yield [examples[i] for i in order[start:start + batch_size]]


async def sft_step(plan: SftPlan, ports: SftPorts, step: int, batch: list[Datum]) -> dict:
    started = time.perf_counter()
    metrics = await ports.trainer.forward_backward(batch)
    metrics |= await ports.trainer.optim_step(step + 1)
    seconds = time.perf_counter() - started
    observe_phase("update", seconds)
    tokens = sum(sum(d.loss_mask) for d in batch)
    return metrics | {"time/update_s": seconds, "trained_tokens_per_second": tokens / seconds if seconds else 0.0}


def reached_target(plan: SftPlan, losses: Sequence[float]) -> bool:
    """True once the mean of the last LOSS_WINDOW losses is at or below the plan's target."""
    if plan.target_loss <= 0 or len(losses) < LOSS_WINDOW:
        return False
    return sum(losses[-LOSS_WINDOW:]) / LOSS_WINDOW <= plan.target_loss


async def run_sft(plan: SftPlan, ports: SftPorts, examples: Sequence[Datum]) -> None:
    """Train up to total_steps batches (fewer once the target loss is reached), checkpoint as
    asked, save the final model, report SUCCEEDED."""
    if not examples:
        raise ValueError("the SFT dataset has no usable examples (spec.dataset.path)")
    await ports.reporter.progress(phase="SETUP", step=0, total_steps=plan.total_steps)
    await ports.trainer.open()
    step = await resume_step(plan.resume, ports.trainer, ports.reporter)
    stream = batches(examples, plan.batch_size, plan.seed)
    for _ in range(step):  # the batches the earlier attempt trained on
        next(stream)
    losses: list[float] = []
    while step < plan.total_steps and not reached_target(plan, losses):
        if ports.stop.is_set():
            raise StopRequested()
        await ports.reporter.progress(phase="UPDATE", step=step, total_steps=plan.total_steps)
        started = time.perf_counter()
        metrics = await sft_step(plan, ports, step, next(stream))
        losses.append(metrics.get("loss", 0.0))
        step += 1
        count_step("sft", time.perf_counter() - started)
        await ports.reporter.metrics(step, metrics)
        log.info("sft_step", job_id=plan.job_id, step=step, loss=round(losses[-1], 4))
        if due(plan.checkpoint_every_steps, step) and step < plan.total_steps:
            await ports.reporter.checkpoint(await ports.trainer.save_checkpoint(f"step-{step}", final=False))
    await ports.reporter.checkpoint(await ports.trainer.save_checkpoint("final", final=True))
    await ports.reporter.progress(phase="FINISHED", step=step, total_steps=plan.total_steps)
    await ports.reporter.finish(succeeded=True, message=finish_message(plan, losses, step))


def finish_message(plan: SftPlan, losses: Sequence[float], steps: int) -> str:
    if reached_target(plan, losses):
        mean = sum(losses[-LOSS_WINDOW:]) / LOSS_WINDOW
        return (f"reached target loss {plan.target_loss:g} (mean of the last {LOSS_WINDOW} steps "
                f"{mean:.4f}) after {steps} of at most {plan.total_steps} steps")
    return f"trained {steps} steps"
