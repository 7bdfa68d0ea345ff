"""RunEpisodes as a domain operation: play every spec group_size times, yield as they finish.

All episodes of a call run as concurrent tasks (at most `max_concurrency` at once), each
with its own environment session (an EnvHost session may be reused by later episodes: see
envhost_sessions.py; the factory's `aclose`, if any, runs when the call ends), sharing one
batcher so their generation steps batch together. Each trajectory's metrics include
`env_overhead_seconds`: what opening, resetting and closing its session cost the episode. Results come back in completion order: a `Trajectory` per finished episode
(environment failures included, with stop reason ENV_ERROR), or an `EpisodeError` for an
episode that crashed for another reason; either way the others go on.

Seeds: every episode of a group resets its environment with the spec's seed (the same
problem for the whole group); episode i samples with derive_seed(spec.seed, sampling.seed, i),
or unseeded when both seeds are 0. A spec without a group id gets a fresh unique one.

Match episodes: a spec with a `match_id` plays its `seat` of that Coordinator match as the
batch's `agent_id` (the match knows its game; reset kwargs and seed are the match's business,
the spec's seed still seeds sampling). The environment factory gets each episode, so it can
give a match episode a match session and any other an EnvHost session.
"""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from opentinker_rollout.metrics import count_episode
from opentinker_rollout.engine import SamplingConfig, derive_seed
from opentinker_rollout.environment import EnvironmentFactory, TimedEnvironment
from opentinker_rollout.episode import Episode, EpisodeLimits, Trajectory, to_trajectory
from opentinker_rollout.fsm import AgentLoop, AgentLoopConfig, ChatRenderer, Generator

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class EpisodeSpec:
    """One problem: passed to the environment's reset(**reset_kwargs) with `seed`; or, with
    `match_id`, one seat of a Coordinator match."""

    group_id: str = ""
    reset_kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    match_id: str = ""
    seat: str = ""


@dataclass(frozen=True, kw_only=True)
class EpisodeBatch:
    """What one RunEpisodes call plays."""

    specs: tuple[EpisodeSpec, ...]
    group_size: int = 1
    sampling: SamplingConfig
    limits: EpisodeLimits
    max_concurrency: int = 64
    agent_id: str = ""
    """The agent these episodes play as (names the seat's occupant in a match; on every trajectory)."""

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError("group_size must be >= 1")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")


@dataclass(frozen=True, kw_only=True)
class EpisodeError:
    """An episode that crashed (not an environment failure); the others go on."""

    group_id: str
    episode_index: int
    message: str
    traceback: str = ""


EpisodeResult = Trajectory | EpisodeError


@dataclass(frozen=True, kw_only=True)
class EpisodeServices:
    """What an episode is played with."""

    generator: Generator
    renderer: ChatRenderer
    environments: EnvironmentFactory
    max_context_length: int


def plan_episodes(batch: EpisodeBatch) -> list[Episode]:
    """The fresh episodes of a batch, group by group."""
    episodes = []
    for spec in batch.specs:
        group_id = spec.group_id or uuid.uuid4().hex[:16]
        seeded = bool(spec.seed or batch.sampling.seed)
        episodes.extend(Episode(group_id=group_id, episode_index=i, reset_kwargs=spec.reset_kwargs,
                                env_seed=spec.seed,
                                sampling_seed=derive_seed(spec.seed, batch.sampling.seed, i) if seeded else 0,
                                match_id=spec.match_id, seat=spec.seat, agent_id=batch.agent_id)
                        for i in range(batch.group_size))
    return episodes


async def run_episodes(batch: EpisodeBatch, services: EpisodeServices) -> AsyncIterator[EpisodeResult]:
    """Play every episode of the batch; yield each result as soon as it is done."""
    limit = asyncio.Semaphore(batch.max_concurrency)
    config = AgentLoopConfig(sampling=batch.sampling, limits=batch.limits,
                             max_context_length=services.max_context_length)
    tasks = [asyncio.create_task(_play(episode, config, services, limit))
             for episode in plan_episodes(batch)]
    try:
        for finished in asyncio.as_completed(tasks):
            yield await finished
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await _end_call(services.environments)


async def _play(episode: Episode, config: AgentLoopConfig, services: EpisodeServices,
                limit: asyncio.Semaphore) -> EpisodeResult:
    async with limit:
        started = time.monotonic()
        try:
            environment = TimedEnvironment(services.environments(episode))
            loop = AgentLoop(generator=services.generator, renderer=services.renderer,
                             environment=environment, config=config)
            await loop.run(episode)
        except Exception as error:  # noqa: BLE001 - one crashed episode must not end the stream
            log.exception("episode_crashed", trajectory_id=episode.trajectory_id)
            count_episode("crashed")
            return EpisodeError(group_id=episode.group_id, episode_index=episode.episode_index,
                                message=f"{type(error).__name__}: {error}",
                                traceback=traceback.format_exc())
        metrics = _metrics(episode, time.monotonic() - started) | {"env_overhead_seconds": environment.overhead_s}
        trajectory = to_trajectory(episode, metrics)
        count_episode(trajectory.stop_reason.value)
        return trajectory


def _metrics(episode: Episode, seconds: float) -> dict[str, float]:
    sampled = sum(episode.loss_mask)
    return {"episode_seconds": seconds, "sampled_tokens": float(sampled),
            "total_tokens": float(len(episode.token_ids)), "turns": float(len(episode.turns))}


async def _end_call(environments: EnvironmentFactory) -> None:
    """Tell a factory that has `aclose` that the call is over (it may close its sessions)."""
    aclose = getattr(environments, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:  # noqa: BLE001 - closing sessions must not fail a finished call
            log.exception("environments_close_failed")
