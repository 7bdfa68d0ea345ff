"""The EnvHost's Prometheus metrics (docs/metrics.md), updated by the `SessionManager`."""

from __future__ import annotations

from opentinker_runtime.core import metrics

OPEN_SESSIONS = metrics.gauge("opentinker_envhost_open_sessions", "Environment sessions open, by "
                              "environment.", ("env",))
STEPS = metrics.counter("opentinker_envhost_steps", "Environment steps that returned a result, by "
                        "environment.", ("env",))
STEP_SECONDS = metrics.histogram("opentinker_envhost_step_seconds", "Time of one game step() call, "
                                 "by environment (failed and timed-out steps included).", ("env",))
ENV_ERRORS = metrics.counter(
    "opentinker_envhost_env_errors", "Game calls that failed, by environment, call (construct, "
    "reset, step) and kind: failed (the game raised or answered something invalid), timeout, "
    "cancelled (the caller gave up while the game ran), invalid_argument (config or reset "
    "arguments the game refused).", ("env", "call", "kind"))


def count_env_error(env: str, call: str, kind: str) -> None:
    ENV_ERRORS.labels(env=env, call=call, kind=kind).inc()
