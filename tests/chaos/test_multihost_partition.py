"""The stack on four "hosts" (network namespaces joined by a bridge, each service on its host's
own address): a tenant's RL job runs with the Scheduler on `control`, its workers on a worker host
and its game on the tenant's `laptop` EnvHost. Once its first checkpoint is recorded, the worker
host that trains it is cut off (its link down: its processes run on, unreachable). The Scheduler declares the
worker lost, re-queues the job, and the next attempt resumes on the other worker host from the
last checkpoint; the cut-off workers stop serving the job on their own once their leases must have
expired, so nothing trains on beside it. The host comes back and its workers register again.
The job SUCCEEDS with exactly its optimizer steps. Needs root (namespaces)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from opentinker.client import SchedulerClient
from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2, worker_pb2
from harness.chaos.checks import prove_steps
from harness.chaos.faults import is_training_metrics
from harness.job_specs import TINY_LLAMA, builtin_model, rl_spec
from harness.multihost import LAPTOP_ENVHOST, WORKER_HOSTS, MultiHostStack
from harness.netns import available

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(not available(), reason="needs root: network namespaces and a bridge")]
STEPS = 4
FAST_FAILOVER = {"OPENTINKER_SCHEDULER_HEARTBEAT_INTERVAL_SECONDS": "1",
                 "OPENTINKER_SCHEDULER_WORKER_TTL_SECONDS": "5"}


@dataclass
class Run:
    job_id: str
    final: job_pb2.Job
    events: list[job_pb2.JobEvent]
    cut_host: str
    attempts: list[list[job_pb2.Assignment]]
    workers_after: list[worker_pb2.Worker]


def spec() -> dict:
    return rl_spec(STEPS, name="multihost", seed=4, model=builtin_model(TINY_LLAMA, 0), checkpoint_every_steps=1,
                   max_retries=2, environment={"env_name": "math", "envhost": LAPTOP_ENVHOST,
                                               "config": {"seed": 4, "eval_size": 4}})


def host_of(stack: MultiHostStack, address: str) -> str:
    return next(host for host in stack.net.hosts if address.startswith(stack.net.address(host) + ":"))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, MultiHostStack]]:
    with MultiHostStack(tmp_path_factory.mktemp("multihost"), settings=FAST_FAILOVER) as stack:
        yield partition_run(stack), stack


def partition_run(stack: MultiHostStack) -> Run:
    events: list[job_pb2.JobEvent] = []
    first_step = threading.Event()
    with SchedulerClient(stack.address("scheduler"), api_key=stack.tenant_key, timeout=30) as tenant, \
            SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as admin:
        job_id = tenant.submit_job(spec()).job_id

        def watch() -> None:
            for event in tenant.watch_job(job_id):
                events.append(event)
                if event.WhichOneof("payload") == "checkpoint":  # a step the Scheduler has recorded
                    first_step.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        assert first_step.wait(timeout=300), stack.logs()
        first = list(admin.get_job(job_id).assignments)
        cut = host_of(stack, next(a.address for a in first if a.role == resources_pb2.ROLE_TRAINER))
        stack.net.cut(cut)
        second = _next_attempt(admin, job_id, first)
        stack.net.restore(cut)
        watcher.join(timeout=400)
        final = admin.get_job(job_id)
        workers_after = _workers_back(admin, stack, cut)
    return Run(job_id=job_id, final=final, events=events, cut_host=cut, attempts=[first, second],
               workers_after=workers_after)


def _next_attempt(admin: SchedulerClient, job_id: str, first: list[job_pb2.Assignment]) -> list[job_pb2.Assignment]:
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = admin.get_job(job_id)
        if job.attempt > 1 and job.state == job_pb2.Job.STATE_RUNNING:
            return list(job.assignments)
        if job.state in (job_pb2.Job.STATE_FAILED, job_pb2.Job.STATE_SUCCEEDED, job_pb2.Job.STATE_CANCELLED):
            raise AssertionError(f"the job ended in its first attempt: {job.status_message}")
        time.sleep(0.5)
    raise AssertionError("no second attempt within 120 s of the cut")


def _workers_back(admin: SchedulerClient, stack: MultiHostStack, host: str) -> list[worker_pb2.Worker]:
    """The cut host's workers, once all four are ALIVE again (or what there is after 60 s)."""
    import time

    deadline = time.monotonic() + 60
    while True:
        mine = [w for w in admin.list_workers() if w.address.startswith(stack.net.address(host) + ":")]
        if (len(mine) == 4 and all(w.state == worker_pb2.Worker.STATE_ALIVE for w in mine)) or time.monotonic() > deadline:
            return mine
        time.sleep(0.5)


def test_the_job_succeeds_with_exactly_its_steps_after_its_worker_host_was_cut_off(run) -> None:  # noqa: ANN001
    result, stack = run
    assert result.final.state == job_pb2.Job.STATE_SUCCEEDED, (result.final.status_message, stack.logs())
    assert {e.metrics.step for e in result.events if is_training_metrics(e)} == set(range(1, STEPS + 1))
    proof = prove_steps(result, Path(stack.checkpoint_dir), STEPS)
    assert proof.trainer_step == STEPS and proof.adam_steps == {STEPS}  # none lost, none applied twice
    assert proof.final_matches_last_state
    assert any(e.WhichOneof("payload") == "worker_lost" for e in result.events)
    assert any(e.WhichOneof("payload") == "log" and e.log.message.startswith("resumed from checkpoint")
               for e in result.events)


def test_the_job_ran_on_four_hosts_each_worker_at_its_own_address(run) -> None:  # noqa: ANN001
    result, stack = run
    hosts = {host_of(stack, a.address) for attempt in result.attempts for a in attempt}
    assert set(WORKER_HOSTS) <= hosts  # the first attempt on the cut host, the next on the other
    placed = [{resources_pb2.Role.Name(a.role): host_of(stack, a.address) for a in attempt} for attempt in result.attempts]
    assert result.cut_host not in placed[1].values(), (result.cut_host, placed)
    assert all(not a.address.startswith("127.") for attempt in result.attempts for a in attempt)
    # the game ran on the tenant's laptop: its EnvHost is registered from there
    with SchedulerClient(stack.address("scheduler"), api_key=stack.tenant_key, timeout=30) as tenant:
        laptop = [w for w in tenant.list_workers() if w.name == LAPTOP_ENVHOST]
    assert laptop and laptop[0].address.startswith(stack.net.address("laptop") + ":")


def test_the_cut_off_host_comes_back_and_its_workers_register_again(run) -> None:  # noqa: ANN001
    result, _ = run
    roles = {w.role for w in result.workers_after if w.state == worker_pb2.Worker.STATE_ALIVE}
    assert roles == {resources_pb2.ROLE_TRAINER, resources_pb2.ROLE_ROLLOUT, resources_pb2.ROLE_ENVHOST,
                     resources_pb2.ROLE_COORDINATOR}, result.workers_after
