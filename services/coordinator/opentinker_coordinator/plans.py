"""What a job asks the driver to do, read from its spec by `remote.plan_from_job`."""

from __future__ import annotations

from dataclasses import dataclass

from opentinker_coordinator.advantages import Estimator
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
    eval_episodes: int = 32
    checkpoint_every_steps: int = 0
    seed: int = 0
    estimator: Estimator = Estimator.GRPO
    normalize_by_std: bool = False
    gamma: float = 1.0
    """Per-turn discount of DISCOUNTED_RETURN."""
    resume: CheckpointRef | None = None
    """An earlier attempt's checkpoint to continue from (the job was re-queued)."""


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
