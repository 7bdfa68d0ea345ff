"""Fault injection (bounded for CI; bench/chaos.py runs the full size): during one RL job every
service is killed with SIGKILL and restarted, Redis is killed and restarted from its append-only
file, and every connection between services is reset. The job must succeed with exactly its
optimizer steps (the Trainer's and AdamW's counts), its final checkpoint must load and equal the
last trained weights, its event stream must be gap-free and show the interruptions."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from harness.chaos.checks import LEASED_ROLES, evidence, prove_steps, sequences, summary, trained_steps
from harness.chaos.faults import ChaosRun, plan_faults, run_with_faults, steps_for
from harness.chaos.stack import ChaosStack
from harness.job_specs import chaos_spec

pytestmark = pytest.mark.timeout(600)
SEED = 20261123


@pytest.fixture(scope="module")
def chaos_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChaosRun, ChaosStack, int]]:
    rng = random.Random(SEED)
    faults = plan_faults(rng, kills_per_service=1, redis_restarts=1, drops=1)
    total_steps = steps_for(faults)
    stack = ChaosStack(tmp_path_factory.mktemp("chaos"))
    stack.up()
    try:
        run = run_with_faults(stack, chaos_spec(total_steps), faults, rng)
        stack.alive_at_end = stack.alive()
        yield run, stack, total_steps
    finally:
        stack.down()


def test_the_job_succeeds_with_exactly_its_optimizer_steps(chaos_run) -> None:  # noqa: ANN001
    run, stack, total_steps = chaos_run
    print(summary(run))
    assert run.final.state == job_pb2.Job.STATE_SUCCEEDED, run.final.status_message
    proof = prove_steps(run, stack.checkpoint_dir, total_steps)
    assert proof.trainer_step == total_steps
    assert proof.adam_steps == {total_steps}  # no step lost, none applied twice
    assert proof.final_matches_last_state  # the final checkpoint loads and holds the trained weights
    assert trained_steps(run) == set(range(1, total_steps + 1))
    # every checkpoint records where the rollouts in flight were (the data cursor)
    saved = [e.checkpoint for e in run.events if e.WhichOneof("payload") == "checkpoint" and not
             e.checkpoint.checkpoint_id.endswith("final")]
    assert saved and all(c.driver_state["async/rollout_cursor"] >= c.step for c in saved)


def test_the_event_stream_is_gap_free_and_shows_every_killed_service(chaos_run) -> None:  # noqa: ANN001
    """A killed Trainer, Rollout or Coordinator shows as a lost worker and a resume from the
    checkpoint; a killed Scheduler as the Coordinator's interrupted and recovered reports; a
    killed EnvHost as the failed episodes of the step it hit. (A Redis restart or a connection
    drop shows only when a call was in flight: bench/chaos.py prints which did.)"""
    run, _, _ = chaos_run
    assert sequences(run) == list(range(1, len(run.events) + 1))
    for index, injected in enumerate(run.injected):
        shown = evidence(run, index)
        if injected.fault.kind != "kill":
            continue
        assert shown, f"no event shows {injected}"
        if injected.fault.target in LEASED_ROLES:
            assert any(line.startswith("worker_lost") for line in shown), (injected, shown)
            assert any(line.startswith("resumed from checkpoint") for line in shown), (injected, shown)
    lost = sum(e.WhichOneof("payload") == "worker_lost" for e in run.events)
    assert run.final.attempt == 1 + lost


def test_every_service_survives_and_is_running_at_the_end(chaos_run) -> None:  # noqa: ANN001
    run, stack, _ = chaos_run
    assert all(stack.alive_at_end.values()), stack.alive_at_end
    kills = {name: p.kills for name, p in stack.processes.items()}
    assert kills == {"redis": 1, "scheduler": 1, "trainer": 1, "rollout": 1, "envhost": 1, "coordinator": 1}
