"""The Trainer's Prometheus metrics (docs/metrics.md), updated where the work happens: training
calls in `session` (rank 0 of a session: a data-parallel step counts once), sessions in
`sessions`."""

from __future__ import annotations

from opentinker_runtime.core import metrics

OPTIMIZER_STEPS = metrics.counter(
    "opentinker_trainer_optimizer_steps", "Optimizer steps, by outcome: applied, or skipped "
    "(a non-finite gradient norm).", ("outcome",))
FORWARD_BACKWARD_SECONDS = metrics.histogram(
    "opentinker_trainer_forward_backward_seconds", "Time of one ForwardBackward (every replica of "
    "a data-parallel session included).", buckets=metrics.SLOW_SECONDS)
OPTIM_STEP_SECONDS = metrics.histogram(
    "opentinker_trainer_optim_step_seconds", "Time of one OptimStep (clip, all-reduce, AdamW).",
    buckets=metrics.SLOW_SECONDS)
TRAINED_TOKENS = metrics.counter(
    "opentinker_trainer_tokens_trained", "Trained tokens (non-zero loss mask) of the datums that "
    "went through ForwardBackward; rate() is training tokens/s.")
TRAINED_DATUMS = metrics.counter(
    "opentinker_trainer_datums_trained", "Datums (sequences) that went through ForwardBackward.")
ACTIVE_SESSIONS = metrics.gauge("opentinker_trainer_active_sessions", "Training sessions open on "
                                "this Trainer.")


def count_forward_backward(datums: int, tokens: int) -> None:
    TRAINED_DATUMS.inc(datums)
    TRAINED_TOKENS.inc(tokens)


def count_optimizer_step(applied: bool) -> None:
    OPTIMIZER_STEPS.labels(outcome="applied" if applied else "skipped").inc()
