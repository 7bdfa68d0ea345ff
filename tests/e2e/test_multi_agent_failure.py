"""A multi-agent job loses its Trainer (kill -9) mid-run: every agent stops at its barrier, the
run pauses, the Scheduler re-queues the job, and the next attempt resumes BOTH agents from the
last common checkpoint (with their Elo ratings) on the surviving Trainer and finishes.

Runs on a stack of its own with a second Trainer process, so either Trainer may take the job
and the one that does can be killed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.client import SchedulerClient
from harness.stack import LocalStack, second_service
from harness.stack_pool import StackPool
from harness.stack_spec import DEFAULT
from tests.e2e._helpers import states_of

pytestmark = pytest.mark.timeout(300)
S = job_pb2.Job
TOTAL_STEPS = 8


def two_agent_spec() -> dict:
    def agent(name: str) -> dict:
        return {"agent_id": name, "model": {"builtin": {"name": "tiny-llama", "seed": 1}}, "adaptation": {"full": {}},
                "algorithm": {"optimizer": {"learning_rate": 1e-4}},
                "sampling": {"max_new_tokens": 3, "temperature": 1.0}, "limits": {"max_turns": 6}}
    return {"type": "RL", "display_name": "two agents, one lost worker",
            "environment": {"env_name": "gomoku", "config": {"size": 3, "win_length": 3, "opponent": "none",
                                                             "max_invalid_moves": 1}},
            "agents": [agent("alpha"), agent("beta")], "multi_agent": {"pairing": "PAIRING_ROUND_ROBIN"},
            "training": {"total_steps": TOTAL_STEPS, "batch_size": 1, "group_size": 2, "checkpoint_every_steps": 2,
                         "max_retries": 1, "seed": 11}}


@pytest.fixture(scope="module")
def stack_with_two_trainers(stack_pool: StackPool) -> Iterator[tuple[LocalStack, dict]]:
    with stack_pool.private(DEFAULT, name="ma-failure") as local, second_service(local, "trainer") as (_, pids):
        yield local, pids


def _wait_for_trainers(scheduler: SchedulerClient, count: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = scheduler._call(scheduler.stub.ListWorkers, pb.ListWorkersRequest()).workers
        if sum(w.role == resources_pb2.ROLE_TRAINER for w in workers) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"fewer than {count} trainers registered")


def _payloads(events: list[job_pb2.JobEvent], kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("payload") == kind]


def test_a_lost_trainer_pauses_every_agent_and_the_job_resumes_both_from_the_common_checkpoint(
        stack_with_two_trainers: tuple[LocalStack, dict]) -> None:
    local, pids = stack_with_two_trainers
    with SchedulerClient(local.address("scheduler"), api_key=local.api_key, timeout=30) as scheduler:
        _wait_for_trainers(scheduler, 2)
        job = scheduler.submit_job(two_agent_spec())
        for event in scheduler.watch_job(job.job_id):
            if event.WhichOneof("payload") == "checkpoint" and event.checkpoint.step >= 2:
                break
        running = scheduler.get_job(job.job_id)
        victim = next(a for a in running.assignments if a.role == resources_pb2.ROLE_TRAINER)
        os.kill(pids[victim.address], signal.SIGKILL)
        final = scheduler.wait(job.job_id)
        events = list(scheduler.watch_job(job.job_id))

    assert final.state == S.STATE_SUCCEEDED, final.status_message
    assert final.attempt == 2
    assert states_of(events)[-4:] == ["QUEUED", "ALLOCATING", "RUNNING", "SUCCEEDED"]
    assert [w.worker_id for w in _payloads(events, "worker_lost")] == [victim.worker_id]
    logs = [line.message for line in _payloads(events, "log")]
    # the lost Trainer's agent says so: it retries through UNAVAILABLE until the re-queue stops
    # the run (or, past the retry budget, pauses every agent at its barrier)
    told = [message for message in logs if message.startswith("paused: agent")
            or message.startswith("trainer call") and " interrupted (UNAVAILABLE" in message]
    assert told and len(told) <= 2, logs  # once per agent training on the lost Trainer at most
    resumed = [message for message in logs if message.startswith("resumed every agent")]
    assert len(resumed) == 1, logs
    step = int(resumed[0].rsplit(" ", 1)[-1])
    assert step >= 2 and step % 2 == 0
    saved = [c for c in _payloads(events, "checkpoint") if c.agent_checkpoint_ids]
    common = next(c for c in saved if c.step == step)
    assert set(common.agent_checkpoint_ids) == {"alpha", "beta"}
    assert set(common.driver_state) == {"elo/alpha", "elo/beta"}

    resumed_at = next(e.sequence for e in events if e.WhichOneof("payload") == "log"
                      and e.log.message.startswith("resumed every agent"))
    for agent in ("alpha", "beta"):
        after = [e.metrics for e in events if e.sequence > resumed_at and e.WhichOneof("payload") == "metrics"
                 and e.metrics.agent_id == agent and "match/games" in e.metrics.values]
        assert [m.step for m in after] == list(range(step + 1, TOTAL_STEPS + 1))  # continued, not restarted
        first_after = after[0].values["elo"]
        # the ratings continue from the checkpoint's, not from 1000
        assert abs(first_after - common.driver_state[f"elo/{agent}"]) <= 16 * 2 * 2 + 1e-6
    elos = {m.agent_id: m.values["elo"] for m in _payloads(events, "metrics")
            if m.step == TOTAL_STEPS and "elo" in m.values}
    assert sum(elos.values()) == pytest.approx(2000.0)
