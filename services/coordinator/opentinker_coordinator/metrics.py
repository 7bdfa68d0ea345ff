"""The Coordinator's Prometheus metrics (docs/metrics.md), updated where the work happens: runs
in `runs`, steps and phases in the drivers (`rl_driver`, `sft_driver`, `ma_driver`)."""

from __future__ import annotations

from opentinker_runtime.core import metrics

ACTIVE_RUNS = metrics.gauge("opentinker_coordinator_active_runs", "Jobs this Coordinator is "
                            "driving right now.")
RUNS_ENDED = metrics.counter("opentinker_coordinator_runs_ended", "Runs whose driver task ended, by "
                             "the run's status then (FINISHED, FAILED; another one when the "
                             "Coordinator shut down mid-run).", ("status",))
STEPS = metrics.counter("opentinker_coordinator_steps", "Training steps completed (an optimizer step "
                        "of the job's policy), by driver (rl, sft, multi_agent: one per learning "
                        "agent's step).", ("driver",))
STEP_SECONDS = metrics.histogram(
    "opentinker_coordinator_step_seconds", "Wall time of one training step (its phases, checkpoint "
    "and, multi-agent, barriers), by driver.", ("driver",), buckets=metrics.SLOW_SECONDS)
PHASE_SECONDS = metrics.histogram(
    "opentinker_coordinator_phase_seconds", "Time of one phase of a training step: rollout, update "
    "(forward_backward + optim_step), weight_sync, eval.", ("phase",), buckets=metrics.SLOW_SECONDS)


def count_step(driver: str, seconds: float) -> None:
    """A completed step of `driver` that took `seconds`."""
    STEPS.labels(driver=driver).inc()
    STEP_SECONDS.labels(driver=driver).observe(seconds)


def observe_phase(phase: str, seconds: float) -> None:
    PHASE_SECONDS.labels(phase=phase).observe(seconds)
