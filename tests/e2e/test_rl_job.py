"""A job's whole life across the five services running as their own processes."""

from __future__ import annotations

import json
import time

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import InvalidArgument, SchedulerClient
from harness.job_specs import builtin_model, checkpoint_model, inference_spec, math_env, rl_spec, sft_spec
from tests.e2e._helpers import states_of

S = job_pb2.Job


def test_rl_job_walks_from_submit_to_succeeded_with_an_ordered_event_stream(scheduler: SchedulerClient):
    job = scheduler.submit_job(rl_spec(total_steps=3))
    assert job.state in (S.STATE_QUEUED, S.STATE_RUNNING)  # RUNNING: started at submit (a device was free)
    assert bool(job.assignments) == (job.state == S.STATE_RUNNING)
    events = list(scheduler.watch_job(job.job_id))
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert all(e.job_id == job.job_id for e in events)
    assert states_of(events) == ["QUEUED", "ALLOCATING", "RUNNING", "SUCCEEDED"]
    step_metrics = {e.metrics.step: dict(e.metrics.values) for e in events
                    if e.WhichOneof("payload") == "metrics" and "reward/mean" in e.metrics.values}
    assert sorted(step_metrics) == [1, 2, 3]
    for values in step_metrics.values():
        assert {"loss", "grad_norm", "tokens_per_second", "time/rollout_s", "time/update_s",
                "time/weight_sync_s", "policy_version", "logprob_gap/mean"} <= set(values)
        # the Trainer recomputes the Rollout's sampling logprobs (same weights, fp32) each step
        assert values["logprob_gap/mean"] < 1e-3
    assert [step_metrics[s]["policy_version"] for s in (1, 2, 3)] == [1.0, 2.0, 3.0]
    checkpoints = [e.checkpoint.checkpoint_id for e in events if e.WhichOneof("payload") == "checkpoint"]
    assert len(checkpoints) == 2 and checkpoints[-1].endswith("final")
    final = scheduler.get_job(job.job_id)
    assert final.state == S.STATE_SUCCEEDED and final.last_event_sequence == events[-1].sequence
    # progress events say where the job is, not its metrics again; the job keeps their latest values
    progress = [e.progress.progress for e in events if e.WhichOneof("payload") == "progress"]
    assert len(progress) >= 3 * 3 and not any(p.latest_metrics for p in progress)
    assert final.progress.latest_metrics["reward/mean"] == step_metrics[3]["reward/mean"]
    assert final.progress.latest_metrics["policy_version"] == 3.0


@pytest.mark.parametrize("in_flight", ["IN_FLIGHT_FINISH_ON_OLD_WEIGHTS", "IN_FLIGHT_SWAP_WEIGHTS"])
def test_an_asynchronous_rl_job_trains_each_step_once_on_tokens_at_most_k_versions_stale(
        scheduler: SchedulerClient, in_flight: str):
    spec = rl_spec(total_steps=4) | {"async": {"max_staleness": 1, "in_flight": in_flight}}
    job = scheduler.submit_job(spec)
    events = list(scheduler.watch_job(job.job_id))
    assert states_of(events)[-1] == "SUCCEEDED", scheduler.get_job(job.job_id).status_message
    step_metrics = {e.metrics.step: dict(e.metrics.values) for e in events
                    if e.WhichOneof("payload") == "metrics" and "reward/mean" in e.metrics.values}
    assert sorted(step_metrics) == [1, 2, 3, 4]
    for values in step_metrics.values():
        assert 0 <= values["async/staleness_mean"] <= values["async/staleness_max"] <= 1
        assert values["async/stale_dropped"] == 0
        assert {"time/rollout_idle_s", "time/trainer_idle_s", "ratio/mean", "loss"} <= set(values)
    checkpoints = [e.checkpoint for e in events if e.WhichOneof("payload") == "checkpoint"]
    assert checkpoints[0].step == 2 and checkpoints[0].driver_state["async/rollout_cursor"] >= 2


def test_watch_resumes_after_a_sequence_without_gaps(scheduler: SchedulerClient):
    job = scheduler.submit_job(rl_spec(total_steps=1))
    everything = list(scheduler.watch_job(job.job_id))
    tail = list(scheduler.watch_job(job.job_id, after_sequence=5))
    assert [e.sequence for e in tail] == [e.sequence for e in everything[5:]]


def test_sft_checkpoint_feeds_an_inference_job_that_writes_jsonl(scheduler: SchedulerClient, tmp_path):
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"messages": [
        {"role": "system", "content": "Answer with the number only."},
        {"role": "user", "content": f"{a}+1="}, {"role": "assistant", "content": str(a + 1)}]}) + "\n"
        for a in range(6)))
    sft = scheduler.submit_job(sft_spec(str(data), total_steps=3, batch_size=4, model=builtin_model(seed=4),
                                        learning_rate=3e-3))
    sft_events = list(scheduler.watch_job(sft.job_id))
    assert states_of(sft_events)[-1] == "SUCCEEDED"
    losses = [e.metrics.values["loss"] for e in sft_events if e.WhichOneof("payload") == "metrics"]
    assert len(losses) == 3
    checkpoint = [e.checkpoint.checkpoint_id for e in sft_events if e.WhichOneof("payload") == "checkpoint"][-1]
    output = tmp_path / "out" / "results.jsonl"
    inference = scheduler.submit_job(inference_spec(model=checkpoint_model(checkpoint), environment=math_env(4, 5),
                                                    num_episodes=5, output_path=str(output)))
    final = scheduler.wait(inference.job_id)
    assert final.state == S.STATE_SUCCEEDED, final.status_message
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [line["group_id"] for line in lines] == [f"eval-{i}" for i in range(5)]
    assert all(line["prompt"].endswith("<|im_start|>assistant\n") for line in lines)
    # every turn says which policy version sampled it (a fixed checkpoint: the loaded weights, 0)
    assert all(turn["policy_version"] == line["policy_version"] == 0 for line in lines for turn in line["transcript"])


def test_cancel_stops_a_running_job_and_frees_its_devices(scheduler: SchedulerClient):
    job = scheduler.submit_job(rl_spec(total_steps=100000, checkpoint_every_steps=0))
    for event in scheduler.watch_job(job.job_id):
        if event.WhichOneof("payload") == "metrics" and event.metrics.step >= 1:
            break
    started = time.monotonic()
    scheduler.cancel_job(job.job_id, reason="e2e test")
    while scheduler.get_job(job.job_id).state != S.STATE_CANCELLED:
        assert time.monotonic() - started < 15, "cancel took too long"
        time.sleep(0.2)
    follow_up = scheduler.wait(scheduler.submit_job(rl_spec(total_steps=1)).job_id)
    assert follow_up.state == S.STATE_SUCCEEDED, "the cancelled job's devices were not released"


def test_a_bad_spec_is_rejected_naming_the_field(scheduler: SchedulerClient):
    with pytest.raises(InvalidArgument, match="group_size"):
        scheduler.submit_job(rl_spec(total_steps=1, group_size=-1))
