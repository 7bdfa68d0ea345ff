"""Every service of the live stack serves Prometheus /metrics, and one small RL job moves the
numbers a person would watch: optimizer steps, episodes, tokens, environment steps, the
Coordinator's steps and phases, the Scheduler's state changes, and RPCs by status code.

The stack is shared with the other e2e tests, so each check compares a scrape after the job
with one before it. Some counters move a moment after the client sees the job end (the
Scheduler counts SUCCEEDED once its script returns, the Coordinator its run once the driver
returns), so checks are retried for a few seconds.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1.scheduler_service_pb2 import GetJobRequest
from opentinker_api.scheduler.v1.scheduler_service_pb2_grpc import SchedulerServiceStub
from opentinker.cli.topology import SERVICE_NAMES
from opentinker.client import SchedulerClient
from harness.job_specs import math_env, rl_spec, sampling_params

pytestmark = pytest.mark.timeout(180)

STEPS = 2
BATCH, GROUP, EVAL_EPISODES = 2, 2, 4
EVERY_TOKEN = list(range(260))
"""Stop ids of tiny-qwen2's whole vocabulary: every action is one token and reaches the game."""
PLAYED = STEPS * BATCH * GROUP + 2 * EVAL_EPISODES
"""Episodes of the job: its training steps' groups, then eval before the first step and after the last."""
Samples = dict[tuple[str, frozenset], float]


def tiny_rl_spec() -> dict:
    return rl_spec(STEPS, name="metrics", seed=4, sampling=sampling_params(3, stop_token_ids=EVERY_TOKEN),
                   environment=math_env(4, EVAL_EPISODES), batch_size=BATCH, group_size=GROUP,
                   eval_episodes=EVAL_EPISODES, checkpoint_every_steps=None)


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str) -> float:
    """A sample summed over all its label values."""
    return sum(v for (sample, _), v in samples.items() if sample == name)


def grpc_ok(samples: Samples, service: str, method: str) -> float:
    return value(samples, "opentinker_grpc_requests_total", grpc_service=f"opentinker.{service}",
                 grpc_method=method, grpc_code="OK")


class Delta:
    """after - before of one service's samples."""

    def __init__(self, before: Samples, after: Samples) -> None:
        self.before, self.after = before, after

    def __call__(self, name: str, **labels: str) -> float:
        return value(self.after, name, **labels) - value(self.before, name, **labels)

    def total(self, name: str) -> float:
        return total(self.after, name) - total(self.before, name)

    def grpc_ok(self, service: str, method: str) -> float:
        return grpc_ok(self.after, service, method) - grpc_ok(self.before, service, method)


def eventually(url: str, before: Samples, check: Callable[[Delta], None], seconds: float = 10) -> None:
    """Scrape until `check` passes (it asserts), at most `seconds`; then its failure is raised."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            check(Delta(before, scrape(url)))
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture(scope="module")
def job_metrics(stack) -> tuple[dict[str, str], dict[str, Samples]]:
    """(metrics URL by service, each service's scrape before one small RL job); the job has run."""
    urls = {p["name"]: p["metrics_url"] for p in stack.status["processes"] if p["name"] in SERVICE_NAMES}
    before = {name: scrape(url) for name, url in urls.items()}
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as scheduler:
        job = scheduler.submit_job(tiny_rl_spec())
        final = scheduler.wait(job.job_id)
    assert final.state == job_pb2.Job.STATE_SUCCEEDED, final.status_message
    return urls, before


def test_up_gives_every_service_a_metrics_url_in_status(stack):
    processes = {p["name"]: p for p in stack.status["processes"]}
    assert "metrics_url" not in processes.pop("redis")
    assert not processes.pop("dashboard").get("metrics_url")  # an HTTP client of the Scheduler: none
    services = {name: p["metrics_url"] for name, p in processes.items()}
    assert set(services) == {"scheduler", "trainer", "rollout", "envhost", "coordinator"}
    assert len(set(services.values())) == 5
    for url in services.values():
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        assert value(scrape(url), "process_resident_memory_bytes") > 0


def test_trainer_counts_each_optimizer_step_of_the_job(job_metrics):
    urls, before = job_metrics

    def check(delta: Delta) -> None:
        assert delta("opentinker_trainer_optimizer_steps_total", outcome="applied") == STEPS
        assert delta("opentinker_trainer_forward_backward_seconds_count") == STEPS
        assert delta("opentinker_trainer_optim_step_seconds_count") == STEPS
        assert delta("opentinker_trainer_tokens_trained_total") > 0
        assert delta("opentinker_trainer_active_sessions") == 0  # the job closed its session
        for method in ("CreateSession", "ForwardBackward", "OptimStep", "ExportWeights", "CloseSession"):
            assert delta.grpc_ok("trainer.v1.TrainerService", method) >= 1, method

    eventually(urls["trainer"], before["trainer"], check)


def test_rollout_counts_episodes_tokens_and_weight_updates(job_metrics):
    urls, before = job_metrics

    def check(delta: Delta) -> None:
        assert delta.total("opentinker_rollout_episodes_total") == PLAYED
        assert delta("opentinker_rollout_episodes_total", termination="done") == PLAYED  # the game answered
        assert delta("opentinker_rollout_generated_tokens_total") == PLAYED  # one one-token action each
        assert delta("opentinker_rollout_generation_seconds_count") == PLAYED
        assert delta("opentinker_rollout_weight_updates_total", format="full") == STEPS
        for method in ("LoadModel", "RunEpisodes", "UpdateWeights"):
            assert delta.grpc_ok("rollout.v1.RolloutService", method) >= 1, method

    eventually(urls["rollout"], before["rollout"], check)


def test_envhost_counts_the_games_steps_without_errors(job_metrics):
    urls, before = job_metrics

    def check(delta: Delta) -> None:
        assert delta("opentinker_envhost_steps_total", env="math") == PLAYED  # one step per episode
        assert delta("opentinker_envhost_step_seconds_count", env="math") == PLAYED
        assert delta.total("opentinker_envhost_env_errors_total") == 0
        assert delta("opentinker_envhost_open_sessions", env="math") == 0  # every episode closed its session

    eventually(urls["envhost"], before["envhost"], check)


def test_coordinator_counts_steps_phases_and_the_finished_run(job_metrics):
    urls, before = job_metrics

    def check(delta: Delta) -> None:
        assert delta("opentinker_coordinator_steps_total", driver="rl") == STEPS
        assert delta("opentinker_coordinator_step_seconds_count", driver="rl") == STEPS
        assert delta("opentinker_coordinator_step_seconds_sum", driver="rl") > 0
        for phase, count in (("rollout", STEPS), ("update", STEPS), ("weight_sync", STEPS), ("eval", 2)):
            assert delta("opentinker_coordinator_phase_seconds_count", phase=phase) == count, phase
        assert delta("opentinker_coordinator_runs_ended_total", status="FINISHED") == 1
        assert delta("opentinker_coordinator_active_runs") == 0

    eventually(urls["coordinator"], before["coordinator"], check)


def test_scheduler_counts_the_jobs_states_and_reads_its_gauges_from_redis(job_metrics):
    urls, before = job_metrics

    def check(delta: Delta) -> None:
        for state in ("QUEUED", "ALLOCATING", "RUNNING", "SUCCEEDED"):
            assert delta("opentinker_scheduler_job_state_changes_total", state=state) == 1, state
        assert delta("opentinker_scheduler_job_events_total", kind="state_changed") == 4
        assert delta("opentinker_scheduler_job_events_total", kind="metrics") >= STEPS
        after = delta.after
        assert value(after, "opentinker_scheduler_redis_up") == 1
        assert value(after, "opentinker_scheduler_jobs", state="RUNNING") == 0
        assert value(after, "opentinker_scheduler_queue_depth") == value(after, "opentinker_scheduler_jobs",
                                                                          state="QUEUED") == 0
        assert value(after, "opentinker_scheduler_active_leases") == 0  # the job's leases were freed
        assert value(after, "opentinker_scheduler_leased_devices") == 0
        assert value(after, "opentinker_scheduler_workers", liveness="live") >= 4
        for method in ("SubmitJob", "WatchJob", "ReportJobEvents", "FinishJob", "Heartbeat"):
            assert delta.grpc_ok("scheduler.v1.SchedulerService", method) >= 1, method

    eventually(urls["scheduler"], before["scheduler"], check)


def test_a_call_refused_for_its_missing_api_key_is_counted_unauthenticated(stack):
    url = next(p["metrics_url"] for p in stack.status["processes"] if p["name"] == "scheduler")
    before = scrape(url)
    with grpc.insecure_channel(stack.address("scheduler")) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            SchedulerServiceStub(channel).GetJob(GetJobRequest(job_id="job-x"), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

    def check(delta: Delta) -> None:
        assert delta("opentinker_grpc_requests_total", grpc_service="opentinker.scheduler.v1.SchedulerService",
                     grpc_method="GetJob", grpc_code="UNAUTHENTICATED") == 1

    eventually(url, before, check)
