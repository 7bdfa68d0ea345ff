"""What the job driver needs from the other services, as domain interfaces.

The gRPC adapters in `remote.py` implement these; tests implement them in-process. Each
port is built for one job and knows how to turn the job's spec into requests, so the
driver deals only in steps, episodes, datums and metrics.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from opentinker_coordinator.types import CheckpointRef, Datum, EpisodeRequest, Trajectory


class TrainerPort(Protocol):
    async def open(self) -> None:
        """Create the job's training session (base model, adaptation, optimizer)."""

    async def forward_backward(self, datums: Sequence[Datum]) -> dict[str, float]:
        """Accumulate gradients; returns {"loss": ..., other loss metrics}."""

    async def optim_step(self, step: int) -> dict[str, float]:
        """Apply the accumulated gradients (idempotent per step); returns {"grad_norm", "learning_rate"}."""

    async def save_checkpoint(self, name: str, *, final: bool) -> CheckpointRef:
        """Exact-resume state, or for `final` an exportable model/adapter."""

    async def load_checkpoint(self, checkpoint_id: str) -> None:
        """Restore a checkpoint of this job into the session (weights, optimizer, step)."""

    async def close(self) -> None: ...


class RolloutPort(Protocol):
    async def open(self) -> None:
        """Load the job's policy (version 0 = the base weights)."""

    def run_episodes(self, requests: Sequence[EpisodeRequest], group_size: int,
                     *, evaluation: bool) -> AsyncIterator[Trajectory]:
        """Play each request group_size times; `evaluation` samples greedily."""

    async def close(self) -> None: ...


class WeightSyncPort(Protocol):
    async def sync(self) -> int:
        """Push the Trainer's current weights to Rollout; returns the new policy version."""


class ReporterPort(Protocol):
    async def metrics(self, step: int, values: dict[str, float]) -> None: ...

    async def progress(self, *, phase: str, step: int, total_steps: int,
                       metrics: dict[str, float] | None = None) -> None: ...

    async def log(self, level: str, message: str, *, source: str = "coordinator") -> None:
        """A line of the job's log (`source` "environment" for what its environment did)."""

    async def checkpoint(self, ref: CheckpointRef) -> None: ...

    async def samples(self, step: int, split: str, trajectories: Sequence[Trajectory]) -> None:
        """A few episodes as text for a person to read (`split`: train, eval or inference)."""

    async def finish(self, *, succeeded: bool, message: str) -> None: ...
