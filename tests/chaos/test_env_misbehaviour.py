"""Environment misbehaviour against a live stack: an RL job whose game raises, answers text UTF-8
cannot carry, exits, leaks memory and spins on the CPU in some of its episodes still succeeds.
The failed episodes are flagged (env_errors), left out of the update (fewer datums than
episodes) and counted by kind on the EnvHost, which keeps SERVING.

Errors reach the user through the job (the same stack also serves tests/e2e/_raising_game.py,
a game that raises in step()): a misspelt env name is refused at submit, naming the known
environments; a job whose every evaluation episode fails fails at its baseline evaluation, its
status names the cause (the first error, with its kind), and `opentinker logs JOB` prints the
game's traceback once (later repeats counted in a summary line).

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

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from opentinker.client.credentials import API_KEY_ENV
from opentinker.client.errors import InvalidArgument
from harness.job_specs import rl_spec
from harness.stack import LocalStack, run_cli
from harness.stack_pool import StackPool
from harness.stack_spec import StackSpec
from tests.chaos._misbehaving_games import FAILING_INDEXES, TRAIN_SCHEDULE

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
STEPS, BATCH, GROUP = 2, 4, 2
RAISING_GAME = "raising_game"
MISBEHAVING_STACK = StackSpec.of(
    dashboard=False, python_path=[str(ROOT)],  # the EnvHost imports the games from tests/
    OPENTINKER_ENVHOST_GAMES=("misbehaving=tests.chaos._misbehaving_games:Misbehaving,"
                              f"{RAISING_GAME}=tests.e2e._raising_game:RaisingGame"),
    OPENTINKER_ENVHOST_CPU_SECONDS_PER_CALL="1",
    OPENTINKER_ENVHOST_MEMORY_LIMIT_MB="128",
)


@pytest.fixture(scope="module")
def stack(stack_pool: StackPool) -> Iterator[LocalStack]:
    """A private stack: the EnvHost's error counters are compared with exact numbers."""
    with stack_pool.private(MISBEHAVING_STACK, name="misbehaving") as local:
        yield local


def misbehaving_rl_spec() -> dict:
    return rl_spec(STEPS, name="misbehaving-games", environment={"env_name": "misbehaving"}, batch_size=BATCH,
                   group_size=GROUP, eval_episodes=2, checkpoint_every_steps=None)


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


def raising_spec(env_name: str) -> dict:
    return rl_spec(1, name="env-errors", environment={"env_name": env_name}, batch_size=1, eval_episodes=2,
                   checkpoint_every_steps=None)


def test_a_raising_games_traceback_reaches_opentinker_logs_and_the_status_names_the_cause(stack: LocalStack) -> None:
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as scheduler:
        with pytest.raises(InvalidArgument) as refused:
            scheduler.submit_job(raising_spec("raising_gam"))
        assert ("spec.environment.env_name: no environment named 'raising_gam' on the registered EnvHosts "
                f"(did you mean '{RAISING_GAME}'?); known: ") in str(refused.value)
        job = scheduler.submit_job(raising_spec(RAISING_GAME))
        final = scheduler.wait(job.job_id)
    assert final.state == job_pb2.Job.STATE_FAILED, final.status_message
    assert final.status_message.startswith(
        "EnvironmentBroken: the evaluation at step 0: no usable episode with the environment up, 3 times "
        "(2 of 2 episodes failed); giving up. Cause: the game raised in step: EnvHost "), final.status_message
    assert "Step failed: INTERNAL: " in final.status_message
    assert "KeyError: 'unscored reply'; the game's traceback is in the job's log" in final.status_message
    logs = run_cli("logs", job.job_id, "--scheduler", stack.address("scheduler"),
                   env={**os.environ, API_KEY_ENV: stack.api_key})
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    first = [i for i, line in enumerate(lines) if "[environment]" in line and "an episode failed" in line]
    assert len(first) == 1, logs.stdout  # told once, not once per episode
    told = lines[first[0]:first[0] + 25]
    assert " ERROR   [environment] the evaluation at step 0: an episode failed: the game raised in step: " in told[0]
    traceback = [line.strip() for line in told[1:] if line.startswith(" " * 8)]
    assert traceback[0] == "Traceback (most recent call last):", logs.stdout
    assert any("_raising_game.py" in line and "in _score" in line for line in traceback), logs.stdout
    assert "KeyError: 'unscored reply'" in traceback, logs.stdout
    assert any("[environment] environment errors in this job, 6 episodes in all: 6 x the game raised in step"
               in line for line in lines), logs.stdout
    assert any("STATE   RUNNING -> FAILED: EnvironmentBroken: the evaluation at step 0" in line for line in lines)
