"""The Trainer's Prometheus metrics (docs/metrics.md), updated where the work happens: training
calls in `session` (rank 0 of a session: a data-parallel step counts once), sessions in
`sessions`, shared bases in `shared_base`, cycles in `cycles`."""

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
RESIDENT_BASES = metrics.gauge(
    "opentinker_trainer_resident_bases", "Base models loaded once and shared by the LoRA sessions "
    "standing on them.")
RESIDENT_ADAPTERS = metrics.gauge(
    "opentinker_trainer_resident_adapters", "LoRA sessions (adapters) standing on a shared base.")
CYCLES = metrics.counter(
    "opentinker_trainer_cycles", "Cycles of queued ForwardBackward calls on a shared base, by kind: "
    "joint (several sessions' calls in one batched forward/backward) or alone (one call).", ("kind",))
CYCLE_SESSIONS = metrics.histogram(
    "opentinker_trainer_cycle_sessions", "Sessions whose calls one cycle ran in one batched pass "
    "(a cycle's batch occupancy).", buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64))
CYCLE_SECONDS = metrics.histogram(
    "opentinker_trainer_cycle_seconds", "Time of one cycle (every call in it).", buckets=metrics.SLOW_SECONDS)


def count_forward_backward(datums: int, tokens: int) -> None:
    TRAINED_DATUMS.inc(datums)
    TRAINED_TOKENS.inc(tokens)


def count_optimizer_step(applied: bool) -> None:
    OPTIMIZER_STEPS.labels(outcome="applied" if applied else "skipped").inc()


def record_cycle(*, joined: int, seconds: float) -> None:
    """One cycle: `joined` sessions' calls ran in its batched pass (0: every call ran alone)."""
    CYCLES.labels(kind="joint" if joined > 1 else "alone").inc()
    CYCLE_SESSIONS.observe(max(joined, 1))
    CYCLE_SECONDS.observe(seconds)
