"""One agent's pipeline: the RL step loop every job runs, a single-agent job as a league of one.

Per agent two tasks share a `PolicyClock`:

    producer   for each step s: wait until the Rollout's weights contain >= s - k optimizer
               steps (k = max_staleness), then collect the batch of step s (the team knows how:
               a single agent's episodes, or its seats of the league's matches)
    consumer   for each step s: take batch s, drop what is more than k versions stale,
               ROLLOUT barrier, UPDATE (advantages, ForwardBackward, OptimStep), UPDATE barrier,
               WEIGHT_SYNC (Trainer -> Rollout), WEIGHT_SYNC barrier, the step's match results,
               eval when due, report the step's metrics, checkpoint when due

With k = 0 the producer starts batch s only after the consumer finished step s - 1: exactly the
synchronous loop (rollout -> update -> weight sync -> eval/checkpoint). With k >= 1 the Rollout
produces the next k batches while the Trainer trains, and the barriers (a league of several
agents) give way to the staleness bound: no agent's batch starts before its own weights are
recent enough, and its matches wait for the opponents' pipelines. New weights go to the Rollout
at once (SWAP_WEIGHTS: applied between two decode steps) or, with FINISH_ON_OLD_WEIGHTS, by the
producer between two batches.

Each step reports, beside the team's episode metrics: async/staleness_mean and _max (versions),
async/stale_dropped, time/rollout_idle_s (the producer waiting for weights before this batch) and
time/trainer_idle_s (the consumer waiting for this batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from opentinker_coordinator.driver.datums import rl_datums
from opentinker_coordinator.driver.env_outages import trainable
from opentinker_coordinator.driver.plans import AgentPlan
from opentinker_coordinator.driver.ports import TrainerPort, WeightSyncPort
from opentinker_coordinator.driver.staleness import AsyncSettings, PolicyClock, split_stale, staleness_metrics
from opentinker_coordinator.metrics import count_step, observe_phase
from opentinker_coordinator.types import CheckpointRef, Trajectory

log = structlog.get_logger(__name__)


class StopRequested(Exception):
    """The job was cancelled or its lease lost; the driver stops at a phase boundary."""


@dataclass(frozen=True, kw_only=True)
class Collected:
    """One batch as the team collected it, with its episode metrics."""

    trajectories: list[Trajectory]
    metrics: dict[str, float]


class Team(Protocol):
    """What an agent's pipeline needs from the job around it (one agent alone, or a league)."""

    replays_batches: bool
    """Whether a batch may be collected again (one agent's episodes: yes; a league's matches,
    shared with the opponents: no, their stale episodes are only dropped)."""

    async def collect(self, agent_id: str, step: int) -> Collected: ...

    async def evaluate(self, agent_id: str, step: int) -> dict[str, float]: ...

    async def barrier(self, agent_id: str, phase: str, step: int) -> None:
        """Synchronous jobs: wait for every agent to reach `phase` of `step` (one agent: at once)."""

    async def rollout_done(self, agent_id: str, step: int) -> None: ...

    async def step_results(self, agent_id: str, step: int) -> dict[str, float]:
        """The step's league metrics for the agent (match results, Elo); {} for one agent."""

    async def progress(self, agent_id: str, phase: str, step: int) -> None: ...

    async def report(self, agent_id: str, step: int, metrics: dict[str, float]) -> None: ...

    async def checkpoint(self, agent_id: str, step: int, ref: CheckpointRef, driver_state: dict[str, float]) -> None: ...


@dataclass(frozen=True, kw_only=True)
class PipelineSettings:
    job_id: str
    total_steps: int
    eval_every_steps: int = 0
    checkpoint_every_steps: int = 0
    asynchrony: AsyncSettings = AsyncSettings()


@dataclass(kw_only=True)
class Learner:
    """The agent's Trainer session and the weight sync into its Rollout (None: a frozen agent)."""

    trainer: TrainerPort
    weights: WeightSyncPort


@dataclass(kw_only=True)
class _Batch:
    collected: Collected
    rollout_idle_s: float


@dataclass(kw_only=True)
class _SyncLog:
    seconds: float = 0.0
    version: int | None = None

    def take(self) -> dict[str, float]:
        if self.version is None:
            return {}
        values = {"policy_version": float(self.version), "time/weight_sync_s": self.seconds}
        self.seconds = 0.0
        return values


def due(every: int, step: int) -> bool:
    return every > 0 and step % every == 0


@dataclass(kw_only=True)
class AgentPipeline:
    agent: AgentPlan
    team: Team
    learner: Learner | None
    settings: PipelineSettings
    stop: asyncio.Event
    clock: PolicyClock
    _batches: dict[int, asyncio.Future] = field(default_factory=dict)
    _producer: asyncio.Task | None = None
    _syncs: _SyncLog = field(default_factory=_SyncLog)

    @property
    def agent_id(self) -> str:
        return self.agent.agent_id

    @property
    def k(self) -> int:
        return self.settings.asynchrony.max_staleness

    async def run(self, start: int) -> None:
        """Every step from `start` to the last; the producer runs ahead by at most k steps."""
        self._producer = asyncio.create_task(self._produce(start), name=f"rollouts-{self.agent_id or 'policy'}")
        try:
            for step in range(start, self.settings.total_steps):
                self.check_stop()
                started = time.perf_counter()
                await self.train_step(step)
                if self.learner is not None:
                    count_step("rl" if not self.agent_id else "multi_agent", time.perf_counter() - started)
        finally:
            self._producer.cancel()
            await asyncio.gather(self._producer, return_exceptions=True)
            for future in self._batches.values():
                if future.done() and not future.cancelled():
                    future.exception()  # retrieved: a batch nobody will train is not an error

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise StopRequested()

    # -- producer -------------------------------------------------------------------------

    def _batch(self, step: int) -> asyncio.Future:
        if step not in self._batches:
            self._batches[step] = asyncio.get_running_loop().create_future()
        return self._batches[step]

    async def _produce(self, start: int) -> None:
        for step in range(start, self.settings.total_steps):
            future = self._batch(step)
            try:
                waited = time.perf_counter()
                await self._wait_for_turn(step)
                idle = time.perf_counter() - waited
                self.check_stop()
                collected = await self.team.collect(self.agent_id, step)
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # noqa: BLE001 - handed to the consumer of this step
                future.set_exception(error)
                return
            future.set_result(_Batch(collected=collected, rollout_idle_s=idle))

    def _may_start(self, step: int) -> bool:
        clock, k = self.clock, self.k
        if clock.ready_steps < step - k:
            return False
        return self.learner is None or clock.rollout_steps >= step - k

    async def _wait_for_turn(self, step: int) -> None:
        """Until the batch of `step` may start; with FINISH_ON_OLD_WEIGHTS the trained weights go
        to the Rollout here, between two batches."""
        while True:
            if self._pushes_between_batches() and self.clock.weights_pending():
                await self._push_weights()
            if self._may_start(step):
                return
            await self.clock.wait_until(lambda: self._may_start(step) or (
                self._pushes_between_batches() and self.clock.weights_pending()) or self.stop.is_set())
            self.check_stop()

    def _pushes_between_batches(self) -> bool:
        settings = self.settings.asynchrony
        return self.learner is not None and not settings.synchronous and settings.finish_on_old_weights

    # -- consumer -------------------------------------------------------------------------

    async def train_step(self, step: int) -> dict[str, float]:
        """One optimizer step of this agent; reports and returns its metrics."""
        await self.team.progress(self.agent_id, "ROLLOUT", step)
        waited = time.perf_counter()
        batch: _Batch = await self._batch(step)
        self._batches.pop(step, None)
        trainer_idle = time.perf_counter() - waited
        trajectories, metrics = await self._fresh(step, batch.collected)
        metrics |= {"time/rollout_idle_s": batch.rollout_idle_s, "time/trainer_idle_s": trainer_idle}
        await self.team.rollout_done(self.agent_id, step)
        await self._barrier("ROLLOUT", step)
        metrics |= await self._update(step, trajectories)
        await self._barrier("UPDATE", step)
        if self.learner is not None and not self._pushes_between_batches():
            await self.team.progress(self.agent_id, "WEIGHT_SYNC", step + 1)
            await self._push_weights()
        metrics |= self._syncs.take()
        await self._barrier("WEIGHT_SYNC", step)
        metrics |= await self.team.step_results(self.agent_id, step)
        if due(self.settings.eval_every_steps, step + 1) and step + 1 < self.settings.total_steps:
            await self.rollout_has(step + 1)
            metrics |= await self.team.evaluate(self.agent_id, step + 1)
        # metrics before the checkpoint: an attempt that dies in between resumes from the previous
        # checkpoint and reports this step again, instead of skipping a step it never reported
        await self.team.report(self.agent_id, step + 1, metrics)
        if due(self.settings.checkpoint_every_steps, step + 1) and self.learner is not None:
            await self._checkpoint(step + 1)
        await self.clock.finished_step(step + 1)
        log.info("rl_step", job_id=self.settings.job_id, agent_id=self.agent_id, step=step + 1, **_headline(metrics))
        return metrics

    async def _fresh(self, step: int, collected: Collected) -> tuple[list[Trajectory], dict[str, float]]:
        """The batch without what is too stale to train on; played again when nothing is left."""
        split = split_stale(collected.trajectories, self.clock, step, self.k)
        metrics = collected.metrics | staleness_metrics(split)
        if self.settings.asynchrony.synchronous:  # every episode was played by this step's weights
            return collected.trajectories, metrics | {"async/stale_dropped": 0.0}
        if split.stale and not trainable(split.fresh) and self.team.replays_batches:
            log.warning("stale_batch_regenerated", job_id=self.settings.job_id, step=step + 1, stale=len(split.stale))
            await self.rollout_has(step - self.k, force=True)
            again = await self.team.collect(self.agent_id, step)
            split = split_stale(again.trajectories, self.clock, step, self.k)
            metrics = again.metrics | staleness_metrics(split) | {
                "async/stale_dropped": metrics["async/stale_dropped"] + len(split.stale)}
        return split.fresh, metrics

    async def _update(self, step: int, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        if self.learner is None:
            return {}
        await self.team.progress(self.agent_id, "UPDATE", step)
        started = time.perf_counter()
        datums = rl_datums(trajectories, self.agent.estimator, normalize_by_std=self.agent.normalize_by_std,
                           gamma=self.agent.gamma)
        metrics: dict[str, float] = {"datums": float(len(datums))}
        if datums:
            metrics |= await self.learner.trainer.forward_backward(datums)
        metrics |= await self.learner.trainer.optim_step(step + 1)
        metrics["time/update_s"] = time.perf_counter() - started
        observe_phase("update", metrics["time/update_s"])
        await self.clock.trained(step + 1)
        return metrics

    async def _push_weights(self) -> None:
        steps = self.clock.trained_steps
        started = time.perf_counter()
        version = await self.learner.weights.sync()
        seconds = time.perf_counter() - started
        observe_phase("weight_sync", seconds)
        self._syncs.seconds += seconds
        self._syncs.version = version
        await self.clock.synced(version, steps)

    async def rollout_has(self, steps: int, *, force: bool = False) -> None:
        """Until the Rollout samples with weights of >= `steps` optimizer steps (eval, the end).
        Between batches the producer pushes them; once it is done (or `force`), this does."""
        if self.learner is None:
            return
        if not force and self._producer is not None and not self._producer.done():
            await self.clock.wait_until(lambda: self.clock.rollout_steps >= steps or self._producer.done()
                                        or self.stop.is_set())
            self.check_stop()
        if self.clock.rollout_steps < steps or (force and self.clock.weights_pending()):
            await self._push_weights()

    async def _barrier(self, phase: str, step: int) -> None:
        if self.settings.asynchrony.synchronous:
            await self.team.barrier(self.agent_id, phase, step)
        self.check_stop()

    async def _checkpoint(self, step: int) -> None:
        name = f"step-{step}-{self.agent_id}" if self.agent_id else f"step-{step}"
        ref = await self.learner.trainer.save_checkpoint(name, final=False)
        # where the rollouts in flight were: a resumed attempt plays them again on the restored
        # weights (episodes derive from (seed, step), so no prompt is trained twice or skipped)
        cursor = max((s for s in self._batches), default=step - 1) + 1
        await self.team.checkpoint(self.agent_id, step, ref, {"async/rollout_cursor": float(max(cursor, step))})


async def sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    if stop.is_set():
        raise StopRequested()


def _headline(metrics: dict) -> dict:
    keys = ("reward/mean", "accuracy", "loss", "eval/accuracy", "match/win_rate", "elo", "async/staleness_max")
    return {k.replace("/", "_"): round(metrics[k], 4) for k in keys if k in metrics}
