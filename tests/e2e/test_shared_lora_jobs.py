"""Two LoRA RL jobs of one base, submitted at once, train side by side on one Trainer device: the
Scheduler leases each a share of the same device (the Trainer and the Rollout offer one CPU slot,
of 8 shares by default), one resident base, their ForwardBackward calls in joint cycles, and each
job succeeds with its own steps (the feature end to end: Scheduler, Coordinator, Trainer,
Rollout, EnvHost)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from opentinker.client import SchedulerClient
from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from harness.job_specs import TINY_LLAMA, builtin_model, lora, rl_spec
from harness.stack import LocalStack
from harness.stack_pool import StackPool
from harness.stack_spec import StackSpec

pytestmark = pytest.mark.slow

STEPS = 6  # long enough that the two jobs overlap even when one starts a few steps late
# One CPU slot each (the default); a cycle waits up to 5 s for the other job's call, so the jobs
# fall in step.
SIDE_BY_SIDE = StackSpec.of(dashboard=False, OPENTINKER_TRAINER_CYCLE_GATHER_MS="5000")


@pytest.fixture(scope="module")
def stack(stack_pool: StackPool) -> Iterator[LocalStack]:
    yield stack_pool.get(SIDE_BY_SIDE)


def trainer_metrics(stack: LocalStack) -> dict[str, float]:
    url = next(p["metrics_url"] for p in stack.status["processes"] if p["name"] == "trainer")
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {line.split()[0]: float(line.split()[-1]) for line in text.splitlines()
            if line.startswith("opentinker_trainer_") and not line.startswith("#")}


def resident_while(scheduler: SchedulerClient, running: threading.Event) -> list[set[tuple[int, str, tuple[str, ...]]]]:
    """ListWorkers' resident models (role, model key, job ids), polled until `running` clears."""
    seen = []
    while running.is_set():
        seen.append({(w.role, m.model_key, tuple(m.job_ids)) for w in scheduler.list_workers() for m in w.resident_models})
        time.sleep(0.5)
    return seen


@pytest.mark.timeout(420)
def test_two_lora_jobs_of_one_base_train_in_joint_cycles_and_each_keeps_its_steps(stack: LocalStack) -> None:
    specs = [rl_spec(STEPS, name=f"shared-{seed}", seed=seed, model=builtin_model(TINY_LLAMA, 0),
                     adaptation=lora(rank=4, alpha=8), checkpoint_every_steps=None) for seed in (1, 2)]
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as scheduler:
        before = trainer_metrics(stack)
        ids = [scheduler.submit_job(spec).job_id for spec in specs]
        running = threading.Event()
        running.set()
        with ThreadPoolExecutor(3) as pool:
            polled = pool.submit(resident_while, scheduler, running)
            events = list(pool.map(lambda job_id: list(scheduler.watch_job(job_id)), ids))
            running.clear()
        finals = [scheduler.get_job(job_id) for job_id in ids]
    assert [f.state for f in finals] == [job_pb2.Job.STATE_SUCCEEDED] * 2, stack.logs()
    for role in (resources_pb2.ROLE_TRAINER, resources_pb2.ROLE_ROLLOUT):  # both on the one device
        assert [list(next(a for a in f.assignments if a.role == role).device_ids) for f in finals] == [["cpu:0"]] * 2
    steps = [[dict(e.metrics.values) for e in job_events
              if e.WhichOneof("payload") == "metrics" and "reward/mean" in e.metrics.values] for job_events in events]
    assert [len(job_steps) for job_steps in steps] == [STEPS, STEPS]
    # every step's ForwardBackward ran in a cycle; a job hears of its share of the pass's time
    # only, nothing of the other job (how many shared the pass, their share of its tokens)
    for job_steps in steps:
        assert all(values["cycle/share_seconds"] > 0 for values in job_steps)
        assert not any("cycle/sessions" in values or "cycle/token_share" in values for values in job_steps)
    after = trainer_metrics(stack)
    joint = 'opentinker_trainer_cycles_total{kind="joint"}'
    assert after.get(joint, 0) - before.get(joint, 0) >= 1
    assert after["opentinker_trainer_resident_bases"] == 0  # both sessions closed: the base is freed
    # the workers told the Scheduler (ListWorkers, the dashboard's workers view) that both jobs
    # shared one base, on the Trainer and on the Rollout
    both = tuple(sorted(ids))
    key = "builtin:tiny-llama@0/default"
    reported = set().union(*polled.result())
    assert (resources_pb2.ROLE_TRAINER, key, both) in reported, reported
    assert (resources_pb2.ROLE_ROLLOUT, key, both) in reported, reported
