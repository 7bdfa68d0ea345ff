"""A 30 s EnvHost outage in the middle of an RL job is ridden out, not fatal: the job waits at its
step (each wait an event with the outage budget left), resumes once the EnvHost is back on the same
port, and SUCCEEDS with exactly its optimizer steps in its first attempt. The outage begins as step
2's weights sync, so the evaluation after it meets the outage: it is collected again once the
EnvHost is back, never reported as a score of the episodes it could not play."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from opentinker_api.common.v1 import progress_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from harness.chaos.checks import prove_steps, seconds, trained_steps
from harness.chaos.faults import PATIENT, ChaosRun, EventRecorder
from harness.chaos.stack import ChaosStack
from harness.job_specs import rl_spec

pytestmark = pytest.mark.timeout(400)
OUTAGE_S = 30.0
TOTAL_STEPS = 6
KILL_AFTER_STEP = 2


@dataclass
class Outage:
    run: ChaosRun
    stack: ChaosStack
    killed_at: float
    back_at: float
    """Wall-clock times (s since the epoch): SIGKILL, and the restarted EnvHost serving again."""


def syncing(recorder: EventRecorder, step: int) -> bool:
    return any(e.WhichOneof("payload") == "progress" and e.progress.progress.phase == progress_pb2.PHASE_WEIGHT_SYNC
               and e.progress.progress.step == step for e in recorder.events)


def outage_spec() -> dict:
    """A tiny RL job evaluated after every step, checkpointed once at its last step (the
    training state whose AdamW step count proves the steps)."""
    return rl_spec(total_steps=TOTAL_STEPS, eval_every_steps=1, checkpoint_every_steps=TOTAL_STEPS)


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    stack = ChaosStack(tmp_path_factory.mktemp("envhost-outage"))
    stack.up()
    try:
        with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30, retry=PATIENT) as client:
            job_id = client.submit_job(outage_spec()).job_id
            recorder = EventRecorder(client, job_id)
            watcher = recorder.start()
            # killed as step 2's weights sync: the evaluation after it starts with the EnvHost gone
            recorder.wait_for(lambda: syncing(recorder, KILL_AFTER_STEP), 240,
                              f"step {KILL_AFTER_STEP}'s weight sync before the outage")
            killed_at = time.time()
            stack.kill("envhost")
            time.sleep(OUTAGE_S)
            stack.restart("envhost")
            back_at = time.time()
            watcher.join(timeout=240)
            assert not watcher.is_alive(), f"job {job_id} did not end within 240 s of the EnvHost's return"
            final = client.get_job(job_id)
        run = ChaosRun(job_id=job_id, final=final, events=recorder.events, injected=[], seconds=0.0)
        yield Outage(run=run, stack=stack, killed_at=killed_at, back_at=back_at)
    finally:
        stack.down()


def coordinator_logs(run: ChaosRun) -> list[tuple[float, str]]:
    return [(seconds(e.time), e.log.message) for e in run.events
            if e.WhichOneof("payload") == "log" and e.log.source == "coordinator"]


def test_the_job_succeeds_in_its_first_attempt_with_exactly_its_optimizer_steps(outage: Outage) -> None:
    run = outage.run
    assert run.final.state == job_pb2.Job.STATE_SUCCEEDED, run.final.status_message
    assert run.final.attempt == 1  # waited out, not re-queued
    proof = prove_steps(run, outage.stack.checkpoint_dir, TOTAL_STEPS)
    assert proof.trainer_step == TOTAL_STEPS
    assert proof.adam_steps == {TOTAL_STEPS}  # no step lost, none applied twice
    assert proof.final_matches_last_state
    assert trained_steps(run) == set(range(1, TOTAL_STEPS + 1))


def test_the_events_show_the_outage_with_its_budget_and_the_recovery(outage: Outage) -> None:
    lines = coordinator_logs(outage.run)
    for at, message in lines:
        print(f"{at - outage.killed_at:+7.1f} s  {message}")
    waits = [(at, m) for at, m in lines if "environment unavailable" in m]
    assert waits, lines
    assert all("of the outage budget left)" in m and "UNAVAILABLE" in m for _, m in waits), waits
    assert all(outage.killed_at - 1 <= at <= outage.back_at + 10 for at, _ in waits), (outage.killed_at, waits)
    recovered = [(at, m) for at, m in lines if "environment back" in m]
    assert recovered, lines
    # the Rollout redials the returned EnvHost promptly: the next collection (at most 5 s of pause
    # away) finds it, instead of a channel stuck in reconnect backoff
    assert recovered[0][0] - outage.back_at < 15, (outage.back_at, recovered)


def test_no_evaluation_during_the_outage_is_reported_as_a_score(outage: Outage) -> None:
    """Every step is evaluated: each evaluation is either a score with no environment errors or
    an event saying why there is none; never reward 0 from episodes that could not be played."""
    scored = {e.metrics.step: dict(e.metrics.values) for e in outage.run.events
              if e.WhichOneof("payload") == "metrics" and "eval/reward/mean" in e.metrics.values}
    assert all(values["eval/env_errors"] == 0 for values in scored.values()), scored
    hit = [m for _, m in coordinator_logs(outage.run)
           if m.startswith(f"the evaluation at step {KILL_AFTER_STEP}: environment unavailable")]
    assert hit, "the outage did not reach the evaluation after the weight sync it began in"
    skipped = {int(m.split("the evaluation at step ")[1].split(":")[0]) for _, m in coordinator_logs(outage.run)
               if m.startswith("the evaluation at step ") and m.endswith("no score is reported for it")}
    assert set(scored) | skipped == set(range(0, TOTAL_STEPS + 1)), (sorted(scored), skipped)
