"""Environment errors reach the user through the job, end to end on a real stack (`opentinker up`)
whose EnvHost serves a game that raises in step():

- a misspelt env name is refused at submit, naming the known environments;
- the job fails at its baseline evaluation (every episode failed: no score), its status names the
  cause (the first error, with its kind), and `opentinker logs JOB` prints the game's traceback
  once (later repeats counted in a summary line).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from opentinker.api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from opentinker.client.credentials import API_KEY_ENV
from opentinker.client.errors import InvalidArgument
from tests._stack import LocalStack, run_cli

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[2]
GAME = "raising_game"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path_factory.mktemp("env-errors-stack"), dashboard=False)
    with pytest.MonkeyPatch.context() as patch:  # `opentinker up` passes its environment on
        patch.setenv("OPENTINKER_ENVHOST_GAMES", f"{GAME}=tests.e2e._raising_game:RaisingGame")
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
        local.up()
    try:
        yield local
    finally:
        local.down()


def spec(env_name: str) -> dict:
    return {
        "type": "RL", "display_name": "env-errors",
        "policy": {"model": {"builtin": {"name": "tiny-qwen2", "seed": 3}}, "adaptation": {"full": {}},
                   "algorithm": {"optimizer": {"learning_rate": 1e-3}},
                   "sampling": {"max_new_tokens": 4, "temperature": 1.0}},
        "environment": {"env_name": env_name},
        "training": {"total_steps": 1, "batch_size": 1, "group_size": 2, "eval_episodes": 2, "seed": 3},
    }


def test_a_raising_games_traceback_reaches_opentinker_logs_and_the_status_names_the_cause(stack: LocalStack) -> None:
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as scheduler:
        with pytest.raises(InvalidArgument) as refused:
            scheduler.submit_job(spec("raising_gam"))
        assert ("spec.environment.env_name: no environment named 'raising_gam' on the registered EnvHosts "
                f"(did you mean '{GAME}'?); known: ") in str(refused.value)
        job = scheduler.submit_job(spec(GAME))
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
