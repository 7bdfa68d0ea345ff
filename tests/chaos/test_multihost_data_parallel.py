"""Data-parallel training across hosts: the stack on four "hosts" (network namespaces, each
service on its own address), one Trainer CPU slot on each worker host. A job asking for two
Trainer devices is leased one on each host; the Trainer holding rank 0 asks the other
(StartReplicas) for rank 1, which joins the session's gloo group over the network. The job
SUCCEEDS with its steps, and its final weights equal, bit for bit, those of the same job trained
data-parallel on one host (a local stack whose Trainer offers two CPU slots). Then the host of
rank 1 is cut off mid-job, after a recorded checkpoint: rank 0's Trainer gives up on it (the
job's stop breaks the replica links; a gradient sum in flight ends at the collective timeout,
20 s here), the job waits for two Trainer devices, and once the host is back it resumes across
both hosts and SUCCEEDS with exactly its steps. Needs root."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from opentinker.client import SchedulerClient
from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from harness.chaos.faults import is_training_metrics
from harness.job_specs import TINY_LLAMA, builtin_model, rl_spec
from harness.multihost import WORKER_HOSTS, MultiHostStack
from harness.netns import available
from harness.stack_pool import StackPool
from harness.stack_spec import StackSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(not available(), reason="needs root: network namespaces and a bridge")]
STEPS = 3
PARTITION_STEPS = 4
SETTINGS = {"OPENTINKER_SCHEDULER_HEARTBEAT_INTERVAL_SECONDS": "1", "OPENTINKER_SCHEDULER_WORKER_TTL_SECONDS": "5",
            "OPENTINKER_TRAINER_COLLECTIVE_TIMEOUT_SECONDS": "20"}
ONE_HOST_TWO_SLOTS = StackSpec.of(dashboard=False, OPENTINKER_TRAINER_CPU_SLOTS="2")


@dataclass
class Trained:
    final: job_pb2.Job
    events: list[job_pb2.JobEvent]
    weights: dict[str, torch.Tensor]


def spec(steps: int = STEPS, **training: object) -> dict:
    job = rl_spec(steps, name="dp-hosts", seed=6, model=builtin_model(TINY_LLAMA, 0),
                  **({"checkpoint_every_steps": None} | training))
    return job | {"resources": [{"role": "ROLE_TRAINER", "device_count": 2}, {"role": "ROLE_ROLLOUT", "device_count": 1}]}


def train(client: SchedulerClient, checkpoint_dir: Path) -> Trained:
    job_id = client.submit_job(spec()).job_id
    events = list(client.watch_job(job_id))
    final = client.get_job(job_id)
    model = checkpoint_dir / f"{job_id}-final" / "model"
    weights = load_file(next(model.glob("*.safetensors"))) if model.is_dir() else {}
    return Trained(final=final, events=events, weights=weights)


@pytest.fixture(scope="module")
def across_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Trained, MultiHostStack]]:
    with MultiHostStack(tmp_path_factory.mktemp("multihost-dp"), settings=SETTINGS) as stack:
        with stack.client(stack.tenant_key) as tenant:
            yield train(tenant, stack.checkpoint_dir), stack


@pytest.fixture(scope="module")
def on_one_host(stack_pool: StackPool) -> Iterator[Trained]:
    with stack_pool.private(ONE_HOST_TWO_SLOTS, name="dp-one-host") as local, \
            SchedulerClient(local.address("scheduler"), api_key=local.api_key, timeout=30) as client:
        yield train(client, local.state_dir / "checkpoints")


def test_a_job_of_two_trainer_devices_trains_with_one_rank_on_each_worker_host(across_hosts) -> None:  # noqa: ANN001
    run, stack = across_hosts
    assert run.final.state == job_pb2.Job.STATE_SUCCEEDED, (run.final.status_message, stack.logs())
    trainers = [a for a in run.final.assignments if a.role == resources_pb2.ROLE_TRAINER]
    hosts = sorted(host for a in trainers for host in WORKER_HOSTS if a.address.startswith(stack.net.address(host) + ":"))
    assert hosts == sorted(WORKER_HOSTS) and all(list(a.device_ids) == ["cpu:0"] for a in trainers)
    assert sorted(e.metrics.step for e in run.events if is_training_metrics(e)) == list(range(1, STEPS + 1))
    logs = {host: (stack.state_dir / "logs" / f"{host}-trainer.log").read_text() for host in WORKER_HOSTS}
    assert sum('"replicas_started"' in text for text in logs.values()) == 1  # the peer started rank 1
    assert sum('"session_created"' in text for text in logs.values()) == 1  # rank 0's Trainer


def test_its_weights_equal_the_same_job_trained_data_parallel_on_one_host(across_hosts, on_one_host) -> None:  # noqa: ANN001
    run, stack = across_hosts
    assert on_one_host.final.state == job_pb2.Job.STATE_SUCCEEDED, on_one_host.final.status_message
    local_trainers = [a for a in on_one_host.final.assignments if a.role == resources_pb2.ROLE_TRAINER]
    assert [sorted(a.device_ids) for a in local_trainers] == [["cpu:0", "cpu:1"]]
    assert run.weights and run.weights.keys() == on_one_host.weights.keys()
    different = [name for name in run.weights if not torch.equal(run.weights[name], on_one_host.weights[name])]
    assert different == [], different


def host_of(stack: MultiHostStack, address: str) -> str:
    return next(host for host in stack.net.hosts if address.startswith(stack.net.address(host) + ":"))


def test_cutting_off_rank_1s_host_requeues_the_job_and_it_resumes_across_both_hosts(across_hosts) -> None:  # noqa: ANN001
    import threading
    import time

    from harness.chaos.checks import prove_steps

    _, stack = across_hosts
    events: list[job_pb2.JobEvent] = []
    recorded = threading.Event()
    with stack.client(stack.tenant_key) as tenant, stack.client(stack.api_key) as admin:
        job_id = tenant.submit_job(spec(PARTITION_STEPS, checkpoint_every_steps=1, max_retries=2)).job_id

        def watch() -> None:
            for event in tenant.watch_job(job_id):
                events.append(event)
                if event.WhichOneof("payload") == "checkpoint":
                    recorded.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        assert recorded.wait(timeout=300), stack.logs()
        first = admin.get_job(job_id)
        trainers = sorted((a for a in first.assignments if a.role == resources_pb2.ROLE_TRAINER),
                          key=lambda a: (-len(a.device_ids), a.worker_id))
        cut = host_of(stack, trainers[1].address)  # rank 1's host
        stack.net.cut(cut)
        deadline = time.monotonic() + 120
        waiting = admin.get_job(job_id)
        while waiting.state != job_pb2.Job.STATE_QUEUED and waiting.attempt < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            waiting = admin.get_job(job_id)
        stack.net.restore(cut)
        watcher.join(timeout=400)
        final = admin.get_job(job_id)
    assert waiting.state == job_pb2.Job.STATE_QUEUED or waiting.attempt >= 2, (waiting.status_message, stack.logs())
    assert final.state == job_pb2.Job.STATE_SUCCEEDED, (final.status_message, stack.logs())
    hosts = {host_of(stack, a.address) for a in final.assignments if a.role == resources_pb2.ROLE_TRAINER}
    assert hosts == set(WORKER_HOSTS)  # the resumed attempt spans both hosts again
    assert {e.metrics.step for e in events if is_training_metrics(e)} == set(range(1, PARTITION_STEPS + 1))
    proof = prove_steps(final, stack.checkpoint_dir, PARTITION_STEPS)
    assert proof.trainer_step == PARTITION_STEPS and proof.adam_steps == {PARTITION_STEPS}
    assert proof.final_matches_last_state
    assert any(e.WhichOneof("payload") == "log" and e.log.message.startswith("resumed from checkpoint") for e in events)
