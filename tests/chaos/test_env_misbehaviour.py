"""Environment misbehaviour against a live stack: an RL job whose game raises, answers text UTF-8
cannot carry, exits, leaks memory and spins on the CPU in some of its episodes still succeeds.
The failed episodes are flagged (env_errors), left out of the update (fewer datums than
episodes) and counted by kind on the EnvHost, which keeps SERVING.

The stack's EnvHost (process isolation, the default) serves tests/chaos/_misbehaving_games.py
with a CPU budget of 1 s per call and 128 MiB per game; the game misbehaves by train index
(TRAIN_SCHEDULE), so each step's failures are known in advance.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from opentinker.api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from tests._stack import LocalStack
from tests.chaos._misbehaving_games import FAILING_INDEXES, TRAIN_SCHEDULE

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
STEPS, BATCH, GROUP = 2, 4, 2
ENVHOST_ENV = {
    "OPENTINKER_ENVHOST_GAMES": "misbehaving=tests.chaos._misbehaving_games:Misbehaving",
    "OPENTINKER_ENVHOST_CPU_SECONDS_PER_CALL": "1",
    "OPENTINKER_ENVHOST_MEMORY_LIMIT_MB": "128",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path_factory.mktemp("misbehaving-stack"))
    with pytest.MonkeyPatch.context() as patch:  # `opentinker up` passes its environment on
        for name, value in ENVHOST_ENV.items():
            patch.setenv(name, value)
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
        local.up()
    try:
        yield local
    finally:
        local.down()


def misbehaving_rl_spec() -> dict:
    return {
        "type": "RL", "display_name": "misbehaving-games",
        "policy": {"model": {"builtin": {"name": "tiny-qwen2", "seed": 3}}, "adaptation": {"full": {}},
                   "algorithm": {"optimizer": {"learning_rate": 1e-3}},
                   "sampling": {"max_new_tokens": 4, "temperature": 1.0}},
        "environment": {"env_name": "misbehaving"},
        "training": {"total_steps": STEPS, "batch_size": BATCH, "group_size": GROUP, "eval_episodes": 2,
                     "seed": 3},
    }


def expected_failures(step: int) -> int:
    """Episodes of train step `step` (1-based) whose index misbehaves in a failing way."""
    indexes = range((step - 1) * BATCH, step * BATCH)
    return GROUP * sum(1 for i in indexes if i % len(TRAIN_SCHEDULE) in FAILING_INDEXES)


def envhost_errors(local: LocalStack) -> dict[tuple[str, str], float]:
    """opentinker_envhost_env_errors_total of env "misbehaving" by (call, kind)."""
    url = next(p["metrics_url"] for p in local.status["processes"] if p["name"] == "envhost")
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {(s.labels["call"], s.labels["kind"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "opentinker_envhost_env_errors_total" and s.labels.get("env") == "misbehaving"}


def test_an_rl_job_survives_games_that_misbehave(stack: LocalStack) -> None:
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as scheduler:
        job = scheduler.submit_job(misbehaving_rl_spec())
        final = scheduler.wait(job.job_id)
        events = list(scheduler.watch_job(job.job_id))
    assert final.state == job_pb2.Job.STATE_SUCCEEDED, final.status_message
    train = {e.metrics.step: dict(e.metrics.values) for e in events
             if e.WhichOneof("payload") == "metrics" and "datums" in e.metrics.values}
    assert sorted(train) == list(range(1, STEPS + 1))
    for step, values in train.items():
        assert values["episodes"] == BATCH * GROUP
        assert values["env_errors"] == expected_failures(step) > 0
        assert values["datums"] == values["episodes"] - values["env_errors"]  # the failed ones are left out
    assert envhost_errors(stack) == {("reset", "failed"): 2 * GROUP, ("reset", "crashed"): GROUP,
                                     ("reset", "memory_limit"): GROUP, ("reset", "cpu_limit"): GROUP}
    with grpc.insecure_channel(stack.address("envhost")) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
