"""One RunEpisodes call in domain terms, and the two decisions it needs: which environments the
episodes play in, and how many run at once.

Single-agent episodes play sessions of an EnvHost game (`EnvHostGame`; its address defaults to
the worker's EnvHost). Match episodes play seats of Coordinator matches (`CoordinatorMatches`);
they all run at once, whatever `max_concurrent_episodes` says: a seat waiting for its turn holds
its slot, so a bound could leave every slot waiting on matches whose other seats wait for this
call's queued ones (agents calling with their matches in different orders). Waiting costs no
compute: generation is bounded by the batcher. Every environment call carries the job's token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentinker_runtime.edge.lease import LeaseContext
from opentinker_rollout.engine import SamplingConfig
from opentinker_rollout.envhost_client import EnvHostChannels, EnvironmentTarget, envhost_environments
from opentinker_rollout.environment import EnvironmentFactory
from opentinker_rollout.episode import EpisodeLimits
from opentinker_rollout.errors import InvalidArgument
from opentinker_rollout.match_client import CoordinatorChannels, match_environments
from opentinker_rollout.policies import LoadedPolicy, PolicyRegistry
from opentinker_rollout.runner import EpisodeBatch, EpisodeResult, EpisodeServices, EpisodeSpec, run_episodes


@dataclass(frozen=True, kw_only=True)
class EnvHostGame:
    """Sessions of the EnvHost game `env_name` ("" address = the worker's default EnvHost)."""

    env_name: str
    address: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CoordinatorMatches:
    """Seats of matches hosted by the Coordinator at `address`."""

    address: str


@dataclass(frozen=True, kw_only=True)
class EpisodeRun:
    """What one RunEpisodes call asks for."""

    policy_id: str
    lease: LeaseContext
    specs: tuple[EpisodeSpec, ...]
    group_size: int
    sampling: SamplingConfig
    limits: EpisodeLimits
    agent_id: str
    environment: EnvHostGame | CoordinatorMatches


class EpisodeRunner:
    """Plays episode runs with this worker's policies, EnvHosts and Coordinators."""

    def __init__(self, registry: PolicyRegistry, channels: EnvHostChannels, *, default_envhost_address: str,
                 max_concurrent_episodes: int = 64, coordinator_channels: CoordinatorChannels | None = None) -> None:
        self.registry = registry
        self.channels = channels
        self.coordinator_channels = coordinator_channels or CoordinatorChannels()
        self.default_envhost_address = default_envhost_address
        self.max_concurrent_episodes = max_concurrent_episodes

    def start(self, run: EpisodeRun, job_token: str) -> AsyncIterator[EpisodeResult]:
        """The run's results as they finish (its policy and lease checked first)."""
        policy = self.registry.get(run.policy_id)
        self.registry.check_lease(policy, run.lease)
        batch = EpisodeBatch(specs=run.specs, group_size=run.group_size, sampling=run.sampling, limits=run.limits,
                             max_concurrency=self.concurrency(run), agent_id=run.agent_id)
        return run_episodes(batch, self._services(policy, run, job_token))

    def concurrency(self, run: EpisodeRun) -> int:
        """Match episodes all at once (see the module doc), others up to max_concurrent_episodes."""
        if isinstance(run.environment, CoordinatorMatches):
            return max(len(run.specs), 1)
        return self.max_concurrent_episodes

    def environments(self, run: EpisodeRun, job_token: str) -> EnvironmentFactory:
        """Seats of Coordinator matches, or sessions of the EnvHost game the run names."""
        environment = run.environment
        if isinstance(environment, CoordinatorMatches):
            return match_environments(self.coordinator_channels, environment.address, job_token=job_token)
        if not environment.env_name:
            raise InvalidArgument("environment.env_name", "is required (unless the episodes play "
                                  "Coordinator matches: EpisodeSpec.match_id)")
        target = EnvironmentTarget(address=environment.address or self.default_envhost_address,
                                   env_name=environment.env_name, config=environment.config,
                                   job_id=run.lease.job_id, job_token=job_token)
        return envhost_environments(self.channels, target)

    def _services(self, policy: LoadedPolicy, run: EpisodeRun, job_token: str) -> EpisodeServices:
        return EpisodeServices(generator=policy.generator, renderer=policy.renderer,
                               environments=self.environments(run, job_token),
                               max_context_length=policy.engine.max_context_length)
