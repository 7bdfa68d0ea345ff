"""The Rollout's Prometheus metrics (docs/metrics.md), updated where the work happens: episodes
in `runner`, generation in `batcher`, weight updates in `policies`."""

from __future__ import annotations

from opentinker_runtime.core import metrics

EPISODES = metrics.counter(
    "opentinker_rollout_episodes", "Episodes finished, by how they ended: the stop reason (done, "
    "max_turns, max_turn_tokens, max_total_tokens, context_length, timeout, env_error) or "
    "crashed (an error that was not the environment's).", ("termination",))
GENERATED_TOKENS = metrics.counter(
    "opentinker_rollout_generated_tokens", "Tokens sampled by the inference engine (every sample of "
    "every request: episodes and Sample calls); rate() is tokens/s.")
GENERATION_SECONDS = metrics.histogram(
    "opentinker_rollout_generation_seconds", "Time from a generation request reaching the batcher "
    "until its samples are done (waiting for a batch slot included).")
WEIGHT_UPDATES = metrics.counter(
    "opentinker_rollout_weight_updates", "Policy weight updates applied, by format (lora_adapter, full).",
    ("format",))
WEIGHT_BYTES = metrics.counter(
    "opentinker_rollout_weight_update_bytes", "Bytes of weights received by applied updates.")


def count_episode(termination: str) -> None:
    EPISODES.labels(termination=termination).inc()


def count_weight_update(weights_format: str, received_bytes: int) -> None:
    WEIGHT_UPDATES.labels(format=weights_format).inc()
    WEIGHT_BYTES.inc(received_bytes)
