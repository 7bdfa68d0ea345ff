"""A worker dies mid-job (kill -9): its lease expires, the Scheduler re-queues the job, and the
next attempt resumes from the last checkpoint on the surviving workers and succeeds; nothing
of the killed attempt stays behind (no Trainer session, no EnvHost session).

Runs on a stack of its own with a second Coordinator process, so either Coordinator may take
the job and the one that does can be killed.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.client import SchedulerClient
from harness.job_specs import rl_spec
from harness.stack import LocalStack, second_service
from harness.stack_pool import StackPool
from harness.stack_spec import DEFAULT
from tests.e2e._helpers import states_of

pytestmark = pytest.mark.timeout(240)
S = job_pb2.Job


@pytest.fixture(scope="module")
def stack_with_two_coordinators(stack_pool: StackPool) -> Iterator[tuple[LocalStack, dict]]:
    with stack_pool.private(DEFAULT, name="requeue") as local, second_service(local, "coordinator") as (_, pids):
        yield local, pids


def test_a_killed_coordinator_costs_one_retry_and_the_job_resumes_from_its_checkpoint(
        stack_with_two_coordinators: tuple[LocalStack, dict]) -> None:
    local, pids = stack_with_two_coordinators
    with SchedulerClient(local.address("scheduler"), api_key=local.api_key, timeout=30) as scheduler:
        workers = scheduler._call(scheduler.stub.ListWorkers, pb.ListWorkersRequest()).workers
        assert sum(w.role == resources_pb2.ROLE_COORDINATOR for w in workers) == 2 or _wait_two(scheduler)
        job = scheduler.submit_job(rl_spec(total_steps=8, max_retries=1))
        seen: list[job_pb2.JobEvent] = []
        for event in scheduler.watch_job(job.job_id):
            seen.append(event)
            if event.WhichOneof("payload") == "checkpoint" and event.checkpoint.step >= 2:
                break
        running = scheduler.get_job(job.job_id)
        victim = next(a for a in running.assignments if a.role == resources_pb2.ROLE_COORDINATOR)
        os.kill(pids[victim.address], signal.SIGKILL)
        final = scheduler.wait(job.job_id)
        events = list(scheduler.watch_job(job.job_id))

    assert final.state == S.STATE_SUCCEEDED, final.status_message
    assert final.attempt == 2 and final.retries_left == 0
    assert states_of(events) == ["QUEUED", "ALLOCATING", "RUNNING", "QUEUED", "ALLOCATING", "RUNNING", "SUCCEEDED"]
    lost = [e.worker_lost for e in events if e.WhichOneof("payload") == "worker_lost"]
    assert [(w.worker_id, w.role) for w in lost] == [(victim.worker_id, resources_pb2.ROLE_COORDINATOR)]
    requeued = next(e.state_changed.reason for e in events if e.WhichOneof("payload") == "state_changed"
                    and e.state_changed.to_state == S.STATE_QUEUED and e.sequence > 1)
    assert "re-queued to resume from checkpoint" in requeued, requeued
    resumed = [e.log.message for e in events if e.WhichOneof("payload") == "log"
               and e.log.message.startswith("resumed from checkpoint")]
    assert len(resumed) == 1
    step = int(resumed[0].rsplit(" ", 1)[-1])
    assert step >= 2 and f"{job.job_id}-step-{step}" in resumed[0]
    resumed_at = next(e.sequence for e in events if e.WhichOneof("payload") == "log"
                      and e.log.message.startswith("resumed from checkpoint"))
    trained_after = [e.metrics.step for e in events if e.sequence > resumed_at
                     and e.WhichOneof("payload") == "metrics" and "time/rollout_s" in e.metrics.values]
    assert trained_after == list(range(step + 1, 9))  # continued from the checkpoint, not from step 1
    assert open_sessions_soon(local) == {"trainer": 0.0, "envhost": 0.0}  # the first attempt's too


OPEN_SESSIONS = {"trainer": "opentinker_trainer_active_sessions", "envhost": "opentinker_envhost_open_sessions"}


def open_sessions_soon(local: LocalStack, seconds: float = 15) -> dict[str, float]:
    """Sessions still open on the Trainer and the EnvHost, polled until none are (or `seconds`)."""
    import time
    urls = {p["name"]: p["metrics_url"] for p in local.status["processes"] if p["name"] in OPEN_SESSIONS}
    deadline = time.monotonic() + seconds
    while True:
        counts = {name: _gauge(urls[name], metric) for name, metric in OPEN_SESSIONS.items()}
        if not any(counts.values()) or time.monotonic() > deadline:
            return counts
        time.sleep(0.5)


def _gauge(url: str, name: str) -> float:
    """The sum of a gauge's samples (over its labels) on a service's /metrics."""
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == name)


def _wait_two(scheduler: SchedulerClient) -> bool:
    import time
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        workers = scheduler._call(scheduler.stub.ListWorkers, pb.ListWorkersRequest()).workers
        if sum(w.role == resources_pb2.ROLE_COORDINATOR for w in workers) == 2:
            return True
        time.sleep(0.5)
    return False
