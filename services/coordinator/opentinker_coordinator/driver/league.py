"""The league of a multi-agent job: the Team its agents' pipelines share.

It opens each step's matches once (on this Coordinator's Agent Protocol), gives each agent its
seats to play, passes the barriers of a synchronous job, computes each step's results and Elo
ratings once (in match order, after every agent finished playing the step), and gathers the
learners' checkpoints of a step into the job's common checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from opentinker_coordinator.driver import elo, episodes
from opentinker_coordinator.driver.env_errors import EnvErrorDigest, job_digest
from opentinker_coordinator.driver.env_outages import evaluate_or_fail, retry_while_unreachable
from opentinker_coordinator.driver.episode_metrics import episode_metrics
from opentinker_coordinator.driver.match_metrics import MatchRecord, agent_match_metrics
from opentinker_coordinator.driver.pairings import PlannedMatch, lineups, step_matches
from opentinker_coordinator.driver.pipeline import Collected, StopRequested
from opentinker_coordinator.driver.plans import MultiAgentPlan
from opentinker_coordinator.driver.samples import pick_samples
from opentinker_coordinator.driver.ports import TrainerPort, WeightSyncPort
from opentinker_coordinator.metrics import observe_phase
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.protocol.protocol_errors import MatchEnvironmentFailed
from opentinker_coordinator.types import CheckpointRef, EpisodeRequest, SeatRequest, Trajectory


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

    async def log(self, level: str, message: str, *, source: str = "coordinator") -> None: ...

    async def checkpoint(self, ref: CheckpointRef, *, agents: dict[str, str] | None = None,
                         driver_state: dict[str, float] | None = None) -> None: ...

    async def samples(self, step: int, split: str, trajectories: Sequence[Trajectory], *,
                      agent_id: str = "") -> None: ...

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


def _envhost_unreachable(error: Exception) -> bool:
    return isinstance(error, MatchEnvironmentFailed) and error.unreachable


async def collect_stream(stream: AsyncIterator[Trajectory]) -> list[Trajectory]:
    return [trajectory async for trajectory in stream]


async def sleep_unless_stopped(ports: MultiAgentPorts, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ports.stop.wait(), seconds)
    if ports.stop.is_set():
        raise StopRequested()


class League:
    """State every pipeline shares: the step's matches (opened once), their results and the
    Elo ratings (computed once per step, in match order), and checkpoints being gathered."""

    replays_batches = False

    def __init__(self, plan: MultiAgentPlan, ports: MultiAgentPorts, seats: Sequence[str],
                 ratings: dict[str, float]) -> None:
        self.plan, self.ports, self.seats = plan, ports, tuple(seats)
        self.lineups = lineups([a.agent_id for a in plan.agents], seats, plan.pairing)
        self.ratings = ratings
        self.opened: dict[int, asyncio.Task] = {}
        self.records: dict[int, list[MatchRecord]] = {}
        self.saved: dict[int, dict[str, CheckpointRef]] = {}
        self.played: dict[int, set[str]] = {}
        self.all_played: dict[int, asyncio.Event] = {}
        self.lead = plan.agents[0].agent_id
        self.env_errors = job_digest(ports.reporter.log)
        """The job's environment errors (its matches' and its evaluations'), each told once."""

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
            pause=lambda seconds: sleep_unless_stopped(self.ports, seconds))

    async def _open_once(self, step: int) -> list[tuple[PlannedMatch, str]]:
        planned = self.planned(step)
        opened = await asyncio.gather(*(self.ports.host.open_match(
            job_id=self.plan.scope, environment=self.plan.environment, seats=self.seats,
            reset_kwargs=match.reset_kwargs, seed=match.seed, request_id=match.request_id,
            agents_by_seat=dict(match.lineup)) for match in planned))
        return [(match, opened_match.match_id) for match, opened_match in zip(planned, opened, strict=True)]

    async def results(self, step: int) -> list[MatchRecord]:
        """The step's match records (all ended once every agent finished playing the step);
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
            self.all_played.pop(step - 1, None)
        return self.records[step]

    # -- the Team of each agent's pipeline ----------------------------------------------------

    async def collect(self, agent_id: str, step: int) -> Collected:
        started = time.perf_counter()
        seats = [SeatRequest(match_id=match_id, seat=seat, group_id=planned.groups[seat],
                             seed=planned.sampling_seeds[seat])
                 for planned, match_id in await self.matches(step)
                 if (seat := planned.seat_of(agent_id)) is not None]
        rollout = self.ports.agents[agent_id].rollout
        trajectories = await collect_stream(rollout.play_seats(seats, evaluation=False))
        await self.env_errors.note(trajectories, what=f"step {step + 1}'s matches (agent {agent_id!r})")
        await self.ports.reporter.samples(step + 1, "train", pick_samples(trajectories), agent_id=agent_id)
        seconds = time.perf_counter() - started
        observe_phase("rollout", seconds)
        sampled = sum(t.sampled_tokens for t in trajectories)
        return Collected(trajectories=trajectories, metrics=episode_metrics(trajectories) | {
            "time/rollout_s": seconds, "tokens_per_second": sampled / seconds if seconds > 0 else 0.0})

    async def evaluate(self, agent_id: str, step: int) -> dict[str, float]:
        return await evaluate_alone(self.plan, self.ports, agent_id, step, self.env_errors)

    async def barrier(self, agent_id: str, phase: str, step: int) -> None:
        await self.ports.host.arrive(self.plan.scope, agent_id, phase, step, timeout_s=self.plan.barrier_timeout_s)

    def _played_event(self, step: int) -> asyncio.Event:
        return self.all_played.setdefault(step, asyncio.Event())

    async def rollout_done(self, agent_id: str, step: int) -> None:
        played = self.played.setdefault(step, set())
        played.add(agent_id)
        if len(played) == len(self.plan.agents):
            self._played_event(step).set()
            self.played.pop(step, None)

    async def step_results(self, agent_id: str, step: int) -> dict[str, float]:
        """The agent's match metrics of `step` and its Elo, once every agent played the step (a
        synchronous job is past its barriers by then; an asynchronous one waits here)."""
        await self._played_event(step).wait()
        records = await self.results(step)
        return agent_match_metrics(agent_id, records) | {"elo": self.ratings[agent_id]}

    async def progress(self, agent_id: str, phase: str, step: int) -> None:
        if agent_id == self.lead:
            await self.ports.reporter.progress(phase=phase, step=step, total_steps=self.plan.total_steps)

    async def report(self, agent_id: str, step: int, metrics: dict[str, float]) -> None:
        await self.ports.reporter.metrics(step, metrics, agent_id=agent_id)

    async def checkpoint(self, agent_id: str, step: int, ref: CheckpointRef, driver_state: dict[str, float]) -> None:
        """Record one agent's checkpoint; the last learner to save reports the common one."""
        saved = self.saved.setdefault(step, {})
        saved[agent_id] = ref
        learners = [a.agent_id for a in self.plan.agents if a.learns]
        if set(saved) == set(learners):
            first = saved[learners[0]]
            state = {f"elo/{agent}": rating for agent, rating in self.ratings.items()}
            if not self.plan.asynchrony.synchronous:
                state |= driver_state
            await self.ports.reporter.checkpoint(
                CheckpointRef(checkpoint_id=first.checkpoint_id, step=step),
                agents={agent: ref.checkpoint_id for agent, ref in saved.items()}, driver_state=state)
            self.saved.pop(step, None)


async def evaluate_alone(plan: MultiAgentPlan, ports: MultiAgentPorts, agent_id: str, step: int,
                         digest: EnvErrorDigest | None = None) -> dict[str, float]:
    """The agent's eval metrics alone in the eval environment at `step` (none when the job has no
    such evaluation); like a single-agent evaluation, EnvironmentBroken or EnvironmentUnavailable
    (naming the cause) when its episodes stayed unusable. `digest`: the job's (else a new one)."""
    if not plan.evaluates_alone:
        return {}
    started = time.perf_counter()
    requests = episodes.eval_requests(plan.eval_episodes, plan.seed)
    trajectories = await evaluate_or_fail(
        lambda: collect_stream(ports.agents[agent_id].rollout.evaluate_alone(requests)),
        what=f"agent {agent_id!r}'s evaluation at step {step}", budget=plan.env_outage,
        tell=ports.reporter.log, pause=lambda seconds: sleep_unless_stopped(ports, seconds),
        digest=digest or job_digest(ports.reporter.log))
    seconds = time.perf_counter() - started
    observe_phase("eval", seconds)
    await ports.reporter.samples(step, "eval", pick_samples(trajectories), agent_id=agent_id)
    return episode_metrics(trajectories, prefix="eval/") | {"time/eval_s": seconds}
