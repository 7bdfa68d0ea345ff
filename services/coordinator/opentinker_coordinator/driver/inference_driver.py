"""INFERENCE jobs: the same episodes and FSM as training, with a fixed policy; JSONL out.

Their environment errors go to the job's log like a training job's (env_errors.py), and a job
whose episodes all failed fails naming the cause (the JSONL of the failed episodes is kept)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from opentinker_coordinator.driver import episodes
from opentinker_coordinator.driver.env_errors import job_digest
from opentinker_coordinator.driver.env_outages import EnvironmentBroken
from opentinker_coordinator.driver.episode_metrics import accuracy_summary, episode_metrics
from opentinker_coordinator.driver.plans import InferencePlan
from opentinker_coordinator.driver.ports import ReporterPort, RolloutPort
from opentinker_coordinator.driver.samples import pick_samples
from opentinker_coordinator.driver.pipeline import StopRequested
from opentinker_coordinator.types import Trajectory


@dataclass(kw_only=True)
class InferencePorts:
    rollout: RolloutPort
    reporter: ReporterPort
    stop: asyncio.Event


def output_record(trajectory: Trajectory) -> dict:
    return {
        "group_id": trajectory.group_id,
        "prompt": trajectory.prompt_text,
        "transcript": trajectory.transcript,
        "reward": trajectory.total_reward,
        "correct": trajectory.correct,
        "stop_reason": str(trajectory.stop_reason),
        "policy_version": trajectory.policy_version,
    }


class InOrderWriter:
    """Writes each line as soon as every earlier episode (in request order) is written.

    Episodes finish out of order when Rollout batches them; the JSONL follows the requests,
    so line i is always episode i, and the file still grows while the job runs.
    """

    def __init__(self, group_ids: list[str], sink) -> None:
        self._order = group_ids
        self._sink = sink
        self._waiting: dict[str, Trajectory] = {}
        self._next = 0

    def add(self, trajectory: Trajectory) -> None:
        self._waiting[trajectory.group_id] = trajectory
        while self._next < len(self._order) and self._order[self._next] in self._waiting:
            ready = self._waiting.pop(self._order[self._next])
            self._sink.write(json.dumps(output_record(ready)) + "\n")
            self._next += 1
        self._sink.flush()


async def run_inference(plan: InferencePlan, ports: InferencePorts) -> None:
    """Play num_episodes held-out problems greedily, write one JSON line each, report accuracy."""
    await ports.reporter.progress(phase="SETUP", step=0, total_steps=1)
    await ports.rollout.open()
    await ports.reporter.progress(phase="EVAL", step=0, total_steps=1)
    output = Path(plan.output_path)
    output.parent.mkdir(parents=True, exist_ok=True)
    trajectories = []
    requests = episodes.eval_requests(plan.num_episodes, plan.seed)
    with output.open("w") as sink:
        in_order = InOrderWriter([request.group_id for request in requests], sink)
        async for trajectory in ports.rollout.run_episodes(requests, 1, evaluation=True):
            if ports.stop.is_set():
                raise StopRequested()
            in_order.add(trajectory)
            trajectories.append(trajectory)
    await _check_environment(trajectories, ports)
    await ports.reporter.samples(0, "inference", pick_samples(trajectories))
    metrics = episode_metrics(trajectories, prefix="eval/")
    await ports.reporter.metrics(1, metrics)
    await ports.reporter.progress(phase="FINISHED", step=1, total_steps=1, metrics=metrics)
    measured = accuracy_summary(metrics)
    summary = f"wrote {len(trajectories)} episodes to {plan.shown_output or output}"
    await ports.reporter.finish(succeeded=True, message=summary + (f"; {measured}" if measured is not None else ""))


async def _check_environment(trajectories: list[Trajectory], ports: InferencePorts) -> None:
    """Tell the episodes' environment errors; EnvironmentBroken when every episode failed."""
    digest = job_digest(ports.reporter.log)
    await digest.note(trajectories, what="inference")
    failed = [t for t in trajectories if t.failed]
    if failed and len(failed) == len(trajectories):
        await digest.tell_summary()
        raise EnvironmentBroken(f"inference: every episode failed ({len(failed)} of {len(trajectories)}). "
                                f"Cause: {digest.cause(failed)}")
    await digest.tell_summary()
