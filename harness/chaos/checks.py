"""What a job that lived through faults must show: exactly its optimizer steps, a final
checkpoint that loads, a gap-free event stream, and every interruption in its events."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from google.protobuf.timestamp_pb2 import Timestamp

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from harness.chaos.faults import ChaosRun, Injected, is_training_metrics

LEASED_ROLES = {"trainer": resources_pb2.ROLE_TRAINER, "rollout": resources_pb2.ROLE_ROLLOUT,
                "coordinator": resources_pb2.ROLE_COORDINATOR}
"""Services that hold a lease of the job: killing one re-queues it."""


@dataclass(frozen=True)
class StepsProof:
    trainer_step: int
    """The step recorded in the last training-state checkpoint."""
    adam_steps: frozenset[int]
    """AdamW's step count of every parameter in it (one value: all updated equally often)."""
    final_matches_last_state: bool
    """The final (HF) checkpoint's weights equal the last training-state checkpoint's."""


def prove_steps(run: ChaosRun, checkpoint_dir: Path, total_steps: int) -> StepsProof:
    """Read the checkpoints the job left: the step-N training state and the final model."""
    from transformers import AutoModelForCausalLM

    last_state = checkpoint_dir / f"{run.job_id}-step-{total_steps}"
    state = torch.load(last_state / "training_state.pt", weights_only=False, map_location="cpu")
    adam = frozenset(int(entry["step"]) for entry in state["optimizer"]["state"].values())
    final = AutoModelForCausalLM.from_pretrained(checkpoint_dir / f"{run.job_id}-final" / "model")
    trained = AutoModelForCausalLM.from_pretrained(last_state / "model")
    same = all(torch.equal(a, b) for a, b in zip(final.state_dict().values(), trained.state_dict().values(),
                                                 strict=True))
    return StepsProof(trainer_step=int(state["step"]), adam_steps=adam, final_matches_last_state=same)


def sequences(run: ChaosRun) -> list[int]:
    return [e.sequence for e in run.events]


def trained_steps(run: ChaosRun) -> set[int]:
    return {e.metrics.step for e in run.events if is_training_metrics(e)}


def seconds(stamp: Timestamp) -> float:
    return stamp.seconds + stamp.nanos / 1e9


def evidence(run: ChaosRun, index: int) -> list[str]:
    """The events that show fault `index` and the recovery from it (those after it and before
    the next fault)."""
    injected = run.injected[index]
    until = run.injected[index + 1].time if index + 1 < len(run.injected) else float("inf")
    window = [e for e in run.events if injected.time - 0.5 <= seconds(e.time) < until]
    return [line for e in window if (line := _shows(injected, e))]


def _shows(injected: Injected, event: job_pb2.JobEvent) -> str:
    kind, target = injected.fault.kind, injected.fault.target
    payload = event.WhichOneof("payload")
    if kind == "kill" and target in LEASED_ROLES:
        if payload == "worker_lost" and event.worker_lost.role == LEASED_ROLES[target]:
            return f"worker_lost {event.worker_lost.worker_id}: {event.worker_lost.reason}"
        if payload == "log" and event.log.message.startswith("resumed from checkpoint"):
            return event.log.message
        return ""
    if payload == "log" and (" interrupted (" in event.log.message or " succeeded after " in event.log.message):
        return event.log.message
    if kind == "kill" and target == "envhost" and is_training_metrics(event) \
            and event.metrics.values.get("env_errors", 0) > 0:
        return f"step {event.metrics.step}: {event.metrics.values['env_errors']:g} episodes failed"
    return ""


def summary(run: ChaosRun) -> dict:
    """Counts for the printed report."""
    kinds = Counter(f"{i.fault.kind} {i.fault.target}" for i in run.injected)
    shown = Counter(f"{i.fault.kind} {i.fault.target}" for n, i in enumerate(run.injected) if evidence(run, n))
    return {"faults": len(run.injected), "kills": sum(i.fault.kind in ("kill", "redis") for i in run.injected),
            "by_kind": dict(kinds), "shown_in_events": dict(shown), "attempts": run.final.attempt,
            "events": len(run.events), "seconds": round(run.seconds, 1)}
