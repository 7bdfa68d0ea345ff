"""The multi-agent RL driver: one independent pipeline per agent, synchronised by barriers.

Each agent has its own policy on the Rollout and (unless frozen) its own Trainer session and
optimiser. Every step, each agent's pipeline runs

    ROLLOUT      play its seats of the step's matches (hosted by this Coordinator's Agent
                 Protocol; the Rollout's FSM joins, awaits its turns and submits actions)
    barrier (ROLLOUT, k)      no agent updates before every agent finished playing
    UPDATE       advantages over its own trajectories only, ForwardBackward, OptimStep
    barrier (UPDATE, k)
    WEIGHT_SYNC  its Trainer's new weights into its Rollout policy
    barrier (WEIGHT_SYNC, k)  no agent plays step k+1 against a half-updated opponent

then reports its metrics (its episodes, its matches' results, Elo) with its agent id, and on
checkpoint steps saves its training state; once every learning agent saved, the job's common
checkpoint is reported (a re-queued attempt resumes every agent from it). An agent whose
pipeline fails is declared lost: the others' barriers and matches break at once (AgentLost)
instead of waiting forever, and the run ends with `AgentFailed` naming the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from opentinker_coordinator.driver import elo
from opentinker_coordinator.driver import episodes
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.driver.datums import rl_datums
from opentinker_coordinator.driver.env_outages import retry_while_unreachable, score_or_skip
from opentinker_coordinator.driver.episode_metrics import episode_metrics
from opentinker_coordinator.driver.match_metrics import MatchRecord, agent_match_metrics
from opentinker_coordinator.metrics import count_step, observe_phase
from opentinker_coordinator.driver.pairings import PlannedMatch, lineups, step_matches
from opentinker_coordinator.driver.plans import AgentPlan, MultiAgentPlan
from opentinker_coordinator.driver.ports import TrainerPort, WeightSyncPort
from opentinker_coordinator.protocol.protocol_errors import AgentLost, MatchEnvironmentFailed
from opentinker_coordinator.driver.rl_driver import StopRequested
from opentinker_coordinator.types import CheckpointRef, EpisodeRequest, SeatRequest, Trajectory

log = structlog.get_logger(__name__)


class AgentFailed(Exception):
    """An agent's pipeline failed; `cause` is the original error."""

    def __init__(self, agent_id: str, cause: BaseException) -> None:
        super().__init__(f"agent {agent_id!r} failed: {type(cause).__name__}: {cause}")
        self.agent_id, self.cause = agent_id, cause


class MatchRolloutPort(Protocol):
    async def open(self) -> None: ...

    def play_seats(self, seats: Sequence[SeatRequest], *, evaluation: bool) -> AsyncIterator[Trajectory]:
        """Play this agent's seat of each match; trajectories as they finish."""

    def evaluate_alone(self, requests: Sequence[EpisodeRequest]) -> AsyncIterator[Trajectory]:
        """Greedy single-agent episodes in the job's eval environment."""

    async def close(self) -> None: ...


class MultiAgentReporter(Protocol):
    async def metrics(self, step: int, values: dict[str, float], *, agent_id: str = "") -> None: ...

    async def progress(self, *, phase: str, step: int, total_steps: int) -> None: ...

    async def log(self, level: str, message: str) -> None: ...

    async def checkpoint(self, ref: CheckpointRef, *, agents: dict[str, str] | None = None,
                         driver_state: dict[str, float] | None = None) -> None: ...

    async def finish(self, *, succeeded: bool, message: str) -> None: ...


@dataclass(kw_only=True)
class AgentPorts:
    rollout: MatchRolloutPort
    trainer: TrainerPort | None = None
    """None for a frozen agent."""
    weights: WeightSyncPort | None = None


@dataclass(kw_only=True)
class MultiAgentPorts:
    agents: dict[str, AgentPorts]
    host: AgentProtocol
    reporter: MultiAgentReporter
    stop: asyncio.Event


class League:
    """State every pipeline shares: the step's matches (opened once), their results and the
    Elo ratings (computed once per step, in match order), and checkpoints being gathered."""

    def __init__(self, plan: MultiAgentPlan, ports: MultiAgentPorts, seats: Sequence[str],
                 ratings: dict[str, float]) -> None:
        self.plan, self.ports, self.seats = plan, ports, tuple(seats)
        self.lineups = lineups([a.agent_id for a in plan.agents], seats, plan.pairing)
        self.ratings = ratings
        self.opened: dict[int, asyncio.Task] = {}
        self.records: dict[int, list[MatchRecord]] = {}
        self.saved: dict[int, dict[str, CheckpointRef]] = {}

    def planned(self, step: int) -> list[PlannedMatch]:
        return step_matches(step=step, seed=self.plan.seed, seats=self.seats, lineup_list=self.lineups,
                            batch_size=self.plan.batch_size, group_size=self.plan.group_size)

    async def matches(self, step: int) -> list[tuple[PlannedMatch, str]]:
        """(plan, match id) of the step's matches, opened by the first pipeline to ask."""
        if step not in self.opened:
            self.opened[step] = asyncio.ensure_future(self._open(step))
        return await asyncio.shield(self.opened[step])

    async def _open(self, step: int) -> list[tuple[PlannedMatch, str]]:
        """Open the step's matches; an unreachable EnvHost is waited for within the outage budget
        (the matches that did open are kept: a repeated request id returns the same match)."""
        return await retry_while_unreachable(
            lambda: self._open_once(step), unreachable=_envhost_unreachable,
            what=f"step {step + 1}'s matches", budget=self.plan.env_outage, tell=self.ports.reporter.log,
            pause=lambda seconds: _sleep_unless_stopped(self.ports, seconds))

    async def _open_once(self, step: int) -> list[tuple[PlannedMatch, str]]:
        planned = self.planned(step)
        opened = await asyncio.gather(*(self.ports.host.open_match(
            job_id=self.plan.scope, environment=self.plan.environment, seats=self.seats,
            reset_kwargs=match.reset_kwargs, seed=match.seed, request_id=match.request_id,
            agents_by_seat=dict(match.lineup)) for match in planned))
        return [(match, opened_match.match_id) for match, opened_match in zip(planned, opened, strict=True)]

    async def results(self, step: int) -> list[MatchRecord]:
        """The step's match records (all ended once every agent passed the ROLLOUT barrier);
        the first call also updates the Elo ratings and forgets the matches."""
        if step not in self.records:
            opened = await self.matches(step)
            records = [MatchRecord.of(self.ports.host.get(match_id)) for _, match_id in opened]
            for record in records:
                if record.finished:
                    self.ratings = elo.update(self.ratings, record.result(), self.plan.elo_k)
            self.records[step] = records
            self.ports.host.forget([match_id for _, match_id in opened])
            self.opened.pop(step - 1, None)
            self.records.pop(step - 2, None)
        return self.records[step]

    async def add_checkpoint(self, step: int, agent_id: str, ref: CheckpointRef) -> None:
        """Record one agent's checkpoint; the last learner to save reports the common one."""
        saved = self.saved.setdefault(step, {})
        saved[agent_id] = ref
        learners = [a.agent_id for a in self.plan.agents if a.learns]
        if set(saved) == set(learners):
            first = saved[learners[0]]
            await self.ports.reporter.checkpoint(
                CheckpointRef(checkpoint_id=first.checkpoint_id, step=step),
                agents={agent: ref.checkpoint_id for agent, ref in saved.items()},
                driver_state={f"elo/{agent}": rating for agent, rating in self.ratings.items()})
            self.saved.pop(step, None)


def _envhost_unreachable(error: Exception) -> bool:
    return isinstance(error, MatchEnvironmentFailed) and error.unreachable


def check_stop(ports: MultiAgentPorts) -> None:
    if ports.stop.is_set():
        raise StopRequested()


async def _collect(stream: AsyncIterator[Trajectory]) -> list[Trajectory]:
    return [trajectory async for trajectory in stream]


class AgentPipeline:
    """One agent's loop over the steps; meets the others only at barriers and in matches."""

    def __init__(self, agent: AgentPlan, league: League) -> None:
        self.agent, self.league = agent, league
        self.plan, self.ports = league.plan, league.ports
        self.own = self.ports.agents[agent.agent_id]
        self.lead = agent.agent_id == self.plan.agents[0].agent_id

    async def run(self, start: int) -> None:
        for step in range(start, self.plan.total_steps):
            check_stop(self.ports)
            started = time.perf_counter()
            await self.step(step)
            if self.own.trainer is not None:
                count_step("multi_agent", time.perf_counter() - started)

    async def step(self, step: int) -> None:
        metrics, trajectories = await self._rollout(step)
        await self._barrier("ROLLOUT", step)
        metrics |= await self._update(step, trajectories)
        await self._barrier("UPDATE", step)
        metrics |= await self._weight_sync(step)
        await self._barrier("WEIGHT_SYNC", step)
        records = await self.league.results(step)
        metrics |= agent_match_metrics(self.agent.agent_id, records)
        metrics["elo"] = self.league.ratings[self.agent.agent_id]
        if _due(self.plan.eval_every_steps, step + 1) and step + 1 < self.plan.total_steps:
            metrics |= await evaluate_alone(self.plan, self.ports, self.agent.agent_id, step + 1)
        # metrics before the checkpoint: an attempt that dies in between resumes from the previous
        # checkpoint and reports this step again, instead of skipping a step it never reported
        await self.ports.reporter.metrics(step + 1, metrics, agent_id=self.agent.agent_id)
        if _due(self.plan.checkpoint_every_steps, step + 1) and self.own.trainer is not None:
            ref = await self.own.trainer.save_checkpoint(f"step-{step + 1}-{self.agent.agent_id}", final=False)
            await self.league.add_checkpoint(step + 1, self.agent.agent_id, ref)
        log.info("agent_step", job_id=self.plan.job_id, agent_id=self.agent.agent_id, step=step + 1,
                 win_rate=round(metrics["match/win_rate"], 3),
                 invalid_move_rate=round(metrics["match/invalid_move_rate"], 3), elo=round(metrics["elo"], 1))

    async def _rollout(self, step: int) -> tuple[dict[str, float], list[Trajectory]]:
        await self._progress("ROLLOUT", step)
        started = time.perf_counter()
        seats = [SeatRequest(match_id=match_id, seat=seat, group_id=planned.groups[seat],
                             seed=planned.sampling_seeds[seat])
                 for planned, match_id in await self.league.matches(step)
                 if (seat := planned.seat_of(self.agent.agent_id)) is not None]
        trajectories = await _collect(self.own.rollout.play_seats(seats, evaluation=False))
        seconds = time.perf_counter() - started
        observe_phase("rollout", seconds)
        sampled = sum(t.sampled_tokens for t in trajectories)
        return episode_metrics(trajectories) | {
            "time/rollout_s": seconds, "tokens_per_second": sampled / seconds if seconds > 0 else 0.0}, trajectories

    async def _update(self, step: int, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        if self.own.trainer is None:
            return {}
        await self._progress("UPDATE", step)
        started = time.perf_counter()
        datums = rl_datums(trajectories, self.agent.estimator, normalize_by_std=self.agent.normalize_by_std,
                           gamma=self.agent.gamma)
        metrics: dict[str, float] = {"datums": float(len(datums))}
        if datums:
            metrics |= await self.own.trainer.forward_backward(datums)
        metrics |= await self.own.trainer.optim_step(step + 1)
        metrics["time/update_s"] = time.perf_counter() - started
        observe_phase("update", metrics["time/update_s"])
        return metrics

    async def _weight_sync(self, step: int) -> dict[str, float]:
        if self.own.weights is None:
            return {}
        await self._progress("WEIGHT_SYNC", step + 1)
        started = time.perf_counter()
        version = await self.own.weights.sync()
        seconds = time.perf_counter() - started
        observe_phase("weight_sync", seconds)
        return {"policy_version": float(version), "time/weight_sync_s": seconds}

    async def _barrier(self, phase: str, step: int) -> None:
        await self.ports.host.arrive(self.plan.scope, self.agent.agent_id, phase, step,
                                     timeout_s=self.plan.barrier_timeout_s)
        check_stop(self.ports)

    async def _progress(self, phase: str, step: int) -> None:
        if self.lead:
            await self.ports.reporter.progress(phase=phase, step=step, total_steps=self.plan.total_steps)


def _due(every: int, step: int) -> bool:
    return every > 0 and step % every == 0


async def evaluate_alone(plan: MultiAgentPlan, ports: MultiAgentPorts, agent_id: str, step: int) -> dict[str, float]:
    """The agent's eval metrics alone in the eval environment at `step`; none (an event says why)
    when its episodes stayed unusable through the outage budget (as a single-agent evaluation)."""
    if not plan.evaluates_alone:
        return {}
    started = time.perf_counter()
    requests = episodes.eval_requests(plan.eval_episodes, plan.seed)
    trajectories = await score_or_skip(
        lambda: _collect(ports.agents[agent_id].rollout.evaluate_alone(requests)),
        what=f"agent {agent_id!r}'s evaluation at step {step}", budget=plan.env_outage,
        tell=ports.reporter.log, pause=lambda seconds: _sleep_unless_stopped(ports, seconds))
    if trajectories is None:
        return {}
    seconds = time.perf_counter() - started
    observe_phase("eval", seconds)
    return episode_metrics(trajectories, prefix="eval/") | {"time/eval_s": seconds}


async def _sleep_unless_stopped(ports: MultiAgentPorts, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ports.stop.wait(), seconds)
    check_stop(ports)


async def _guarded(pipeline: AgentPipeline, start: int) -> None:
    """Run one pipeline; if it fails (or stops), declare its agent lost so nobody waits for it."""
    try:
        await pipeline.run(start)
    except AgentLost:
        raise
    except BaseException as error:
        await pipeline.ports.host.agent_lost(pipeline.plan.scope, pipeline.agent.agent_id,
                                             f"{type(error).__name__}: {error}")
        if isinstance(error, (StopRequested, asyncio.CancelledError)):
            raise
        raise AgentFailed(pipeline.agent.agent_id, error) from error


async def run_pipelines(league: League, start: int) -> None:
    """Every agent's pipeline to the last step; the first real failure is raised."""
    pipelines = [AgentPipeline(agent, league) for agent in league.plan.agents]
    results = await asyncio.gather(*(_guarded(p, start) for p in pipelines), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    for kind in (StopRequested, AgentFailed, BaseException):
        first = next((e for e in errors if isinstance(e, kind)), None)
        if first is not None:
            raise first


async def _resume(plan: MultiAgentPlan, ports: MultiAgentPorts) -> int:
    if plan.resume is None:
        return 0
    for agent in plan.agents:
        own = ports.agents[agent.agent_id]
        if own.trainer is not None:
            await own.trainer.load_checkpoint(plan.resume.checkpoint_ids[agent.agent_id])
            await own.weights.sync()
    await ports.reporter.log("WARNING", f"resumed every agent from the common checkpoint of step "
                                        f"{plan.resume.step}")
    return plan.resume.step


async def _final(plan: MultiAgentPlan, ports: MultiAgentPorts, league: League) -> str:
    for agent in plan.agents:
        final = await evaluate_alone(plan, ports, agent.agent_id, plan.total_steps)
        if final:
            await ports.reporter.metrics(plan.total_steps, final, agent_id=agent.agent_id)
    refs = {a.agent_id: await ports.agents[a.agent_id].trainer.save_checkpoint(f"final-{a.agent_id}", final=True)
            for a in plan.agents if a.learns}
    if refs:
        first = next(iter(refs.values()))
        await ports.reporter.checkpoint(CheckpointRef(checkpoint_id=first.checkpoint_id, step=plan.total_steps),
                                        agents={agent: ref.checkpoint_id for agent, ref in refs.items()},
                                        driver_state={f"elo/{a}": r for a, r in league.ratings.items()})
    return "elo " + ", ".join(f"{agent} {rating:.0f}" for agent, rating in league.ratings.items())


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
        start = await _resume(plan, ports)
        if not start:
            for agent in plan.agents:
                initial = await evaluate_alone(plan, ports, agent.agent_id, 0)
                if initial:
                    await ports.reporter.metrics(0, initial, agent_id=agent.agent_id)
        await run_pipelines(league, start)
        summary = await _final(plan, ports, league)
    finally:
        ports.host.forget_job(plan.scope)
    await ports.reporter.progress(phase="FINISHED", step=plan.total_steps, total_steps=plan.total_steps)
    await ports.reporter.finish(succeeded=True, message=summary)


async def _open(own: AgentPorts) -> None:
    await own.rollout.open()
    if own.trainer is not None:
        await own.trainer.open()
