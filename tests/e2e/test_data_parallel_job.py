"""An RL job whose spec leases two Trainer devices trains data-parallel end to end: a stack
whose Trainer offers two CPU slots, a 2-rank session, the same logprob contract as one rank."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from harness.job_specs import rl_spec
from harness.stack import LocalStack
from harness.stack_pool import StackPool
from harness.stack_spec import StackSpec


TWO_TRAINER_SLOTS = StackSpec.of(OPENTINKER_TRAINER_CPU_SLOTS="2")


@pytest.fixture(scope="module")
def two_slot_stack(stack_pool: StackPool) -> Iterator[LocalStack]:
    """A private stack: the test reads the sessions its Trainer's log records."""
    with stack_pool.private(TWO_TRAINER_SLOTS, name="dp") as local:
        yield local


@pytest.mark.timeout(300)
def test_a_job_leasing_two_trainer_devices_trains_on_two_ranks(two_slot_stack: LocalStack) -> None:
    spec = rl_spec(total_steps=2) | {"resources": [
        {"role": "ROLE_TRAINER", "device_count": 2}, {"role": "ROLE_ROLLOUT", "device_count": 1}]}
    with SchedulerClient(two_slot_stack.address("scheduler"), api_key=two_slot_stack.api_key,
                         timeout=30) as scheduler:
        job = scheduler.submit_job(spec)
        events = list(scheduler.watch_job(job.job_id))
        final = scheduler.get_job(job.job_id)
    assert final.state == job_pb2.Job.STATE_SUCCEEDED, two_slot_stack.logs()
    trainer = next(a for a in final.assignments if a.role == resources_pb2.ROLE_TRAINER)
    assert sorted(trainer.device_ids) == ["cpu:0", "cpu:1"]
    created = [json.loads(line) for line in (two_slot_stack.state_dir / "logs" / "trainer.log")
               .read_text().splitlines() if '"session_created"' in line]
    assert [sorted(entry["device_ids"]) for entry in created] == [["cpu:0", "cpu:1"]]
    steps = [dict(e.metrics.values) for e in events
             if e.WhichOneof("payload") == "metrics" and "reward/mean" in e.metrics.values]
    assert len(steps) == 2
    # the 2-rank Trainer recomputes the Rollout's sampling logprobs exactly as one rank does
    assert all(values["logprob_gap/mean"] < 1e-3 for values in steps)
