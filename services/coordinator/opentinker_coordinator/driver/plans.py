"""What a job asks the driver to do: built by `job_plans` from the job's resolved plan (its field
defaults here are the table's, `opentinker_runtime.jobplan.defaults`, for tests that build plans)."""

from __future__ import annotations

from dataclasses import dataclass

from opentinker_runtime.jobplan import defaults
from opentinker_coordinator.driver.advantages import Estimator
from opentinker_coordinator.driver.env_outages import OutageBudget
from opentinker_coordinator.driver.pairings import Pairing
from opentinker_coordinator.driver.staleness import AsyncSettings
from opentinker_coordinator.protocol.seated_environment import MatchEnvironmentRef
from opentinker_coordinator.types import CheckpointRef


@dataclass(frozen=True, kw_only=True)
class RlPlan:
    job_id: str
    total_steps: int
    batch_size: int
    """Problems (environment resets) per step."""
    group_size: int
    """Episodes per problem."""
    eval_every_steps: int = 0
    """0 = evaluate only at the end."""
    eval_episodes: int = defaults.EVAL_EPISODES
    checkpoint_every_steps: int = 0
    seed: int = 0
    estimator: Estimator = Estimator.GRPO
    normalize_by_std: bool = False
    gamma: float = defaults.GAMMA
    """Per-turn discount of DISCOUNTED_RETURN."""
    resume: CheckpointRef | None = None
    """An earlier attempt's checkpoint to continue from (the job was re-queued)."""
    env_outage: OutageBudget = OutageBudget()
    """How long a batch waits out an unreachable environment (the Coordinator's setting)."""
    asynchrony: AsyncSettings = AsyncSettings()
    """JobSpec.async: how far rollouts run ahead of training (0 = synchronous)."""


@dataclass(frozen=True, kw_only=True)
class SftPlan:
    job_id: str
    total_steps: int
    """The cap: at most this many optimizer steps."""
    batch_size: int
    checkpoint_every_steps: int = 0
    seed: int = 0
    target_loss: float = 0.0
    """Finish early once the mean loss of the last `LOSS_WINDOW` steps is <= this; 0 = off."""
    resume: CheckpointRef | None = None


@dataclass(frozen=True, kw_only=True)
class InferencePlan:
    job_id: str
    num_episodes: int
    output_path: str
    """JSONL written by the coordinator: one line per episode."""
    seed: int = 0
    shown_output: str = ""
    """How the job's messages name the output (its path as the spec gave it); empty: output_path."""


@dataclass(frozen=True, kw_only=True)
class AgentPlan:
    """One agent of a multi-agent job: how it learns (or that it does not)."""

    agent_id: str
    learns: bool = True
    """False for a frozen agent: it plays but is never updated (a snapshot opponent)."""
    estimator: Estimator = Estimator.GRPO
    normalize_by_std: bool = False
    gamma: float = defaults.GAMMA


@dataclass(frozen=True, kw_only=True)
class MultiAgentResume:
    step: int
    checkpoint_ids: dict[str, str]
    """The learning agents' checkpoints of `step` (the job's common checkpoint)."""
    ratings: dict[str, float]
    """Elo ratings at `step`, by agent."""


@dataclass(frozen=True, kw_only=True)
class MultiAgentPlan:
    job_id: str
    scope: str
    """The job's scope in the Agent Protocol: one per attempt, so a stale attempt's matches and
    barriers never mix with the new one's."""
    agents: tuple[AgentPlan, ...]
    environment: MatchEnvironmentRef
    pairing: Pairing
    total_steps: int
    batch_size: int
    """Problems (match resets) per pairing per step."""
    group_size: int
    """Matches per problem and pairing; an agent's trajectories of one problem and seat form a group."""
    eval_every_steps: int = 0
    eval_episodes: int = defaults.EVAL_EPISODES
    evaluates_alone: bool = False
    """True when every agent is also evaluated alone in the job's eval environment."""
    checkpoint_every_steps: int = 0
    seed: int = 0
    elo_k: float = defaults.ELO_K
    barrier_timeout_s: float = defaults.BARRIER_TIMEOUT_S
    resume: MultiAgentResume | None = None
    env_outage: OutageBudget = OutageBudget()
    """How long an evaluation waits out an unreachable environment (the Coordinator's setting)."""
    asynchrony: AsyncSettings = AsyncSettings()
    """JobSpec.async: each agent's rollouts run ahead of its training by at most max_staleness
    steps; 0 = synchronous, the agents in lockstep through the barriers."""
