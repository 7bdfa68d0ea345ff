"""Hand-written in-process implementations of the driver's ports (no grpc)."""

from __future__ import annotations

import asyncio

from opentinker_coordinator.types import CheckpointRef, StopReason, Trajectory


class ScriptedRollout:
    """Episodes whose reward is 1 when the policy version is at least `learns_at`."""

    def __init__(self, learns_at: int = 2) -> None:
        self.version, self.learns_at, self.calls, self.opened = 0, learns_at, [], False

    async def open(self) -> None:
        self.opened = True

    async def run_episodes(self, requests, group_size, *, evaluation):
        self.calls.append((len(requests), group_size, evaluation))
        for request in requests:
            for i in range(group_size):
                reward = 1.0 if (self.version >= self.learns_at or i % 2 == 0) else 0.0
                yield Trajectory(group_id=request.group_id, token_ids=[1, 2, 3], loss_mask=[0, 1, 1],
                                 sampling_logprobs=[0.0, -1.0, -1.0], total_reward=reward,
                                 stop_reason=StopReason.DONE, policy_version=self.version, correct=reward == 1.0)

    async def close(self) -> None: ...


class RecordingTrainer:
    def __init__(self) -> None:
        self.batches, self.steps, self.checkpoints, self.opened = [], [], [], False
        self.loaded = []

    async def open(self) -> None:
        self.opened = True

    async def forward_backward(self, datums):
        self.batches.append(list(datums))
        return {"loss": 1.0 / (len(self.batches))}

    async def optim_step(self, step):
        self.steps.append(step)
        return {"grad_norm": 0.5, "learning_rate": 1e-3}

    async def save_checkpoint(self, name, *, final):
        self.checkpoints.append((name, final))
        return CheckpointRef(checkpoint_id=f"ckpt-{name}", step=len(self.steps))

    async def load_checkpoint(self, checkpoint_id):
        self.loaded.append(checkpoint_id)

    async def close(self) -> None: ...


class VersionSync:
    def __init__(self, rollout: ScriptedRollout) -> None:
        self.rollout = rollout

    async def sync(self) -> int:
        self.rollout.version += 1
        return self.rollout.version


class RecordingReporter:
    def __init__(self, stop_after_metrics: int | None = None, stop: asyncio.Event | None = None) -> None:
        self.events, self.finished = [], None
        self.stop_after_metrics, self.stop = stop_after_metrics, stop

    async def metrics(self, step, values):
        self.events.append(("metrics", step, dict(values)))
        metric_events = [e for e in self.events if e[0] == "metrics"]
        if self.stop_after_metrics is not None and len(metric_events) >= self.stop_after_metrics:
            self.stop.set()

    async def progress(self, *, phase, step, total_steps, metrics=None):
        self.events.append(("progress", phase, step))

    async def log(self, level, message, *, source="coordinator"):
        """("log", level, message) for the Coordinator's own lines, ("log:environment", ...) for
        the environment's (env_errors.py)."""
        self.events.append(("log" if source == "coordinator" else f"log:{source}", level, message))

    async def checkpoint(self, ref):
        self.events.append(("checkpoint", ref.checkpoint_id, ref.step))

    async def samples(self, step, split, trajectories, *, agent_id=""):
        self.events.append(("samples", step, split, len(trajectories)))

    async def finish(self, *, succeeded, message):
        self.finished = (succeeded, message)
