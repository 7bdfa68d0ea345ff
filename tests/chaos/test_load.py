"""Load, bounded for CI, on one live stack (real processes via `opentinker up`): 256 EnvHost
sessions at once, 1,000 queued jobs, 50 watchers of one job. Nothing may be lost or crossed,
and the services' memory must stay flat over repeated rounds. bench/load.py runs the same loads
at full size with more rounds and prints a summary; the loads are harness/load.

Never asserts a time: only counts, sequences and RSS growth against RSS_BOUND_MIB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from harness.load import (
    RSS_BOUND_MIB,
    MemoryTrend,
    MiB,
    ProcessProbe,
    queued_jobs_load,
    sampling,
    sessions_load,
    watchers_load,
)
from harness.stack import LocalStack
from harness.stack_pool import StackPool
from harness.stack_spec import DEFAULT

pytestmark = pytest.mark.timeout(180)
ENVHOST_MAX_SESSIONS = 256  # the EnvHost's default max_sessions, which the stack keeps
ROUNDS = 3  # a warm-up round, then two whose RSS is compared with it
WATCHERS = 50
BOUND = int(RSS_BOUND_MIB * MiB)


@pytest.fixture(scope="module")
def stack(stack_pool: StackPool) -> Iterator[LocalStack]:
    """A private stack: its EnvHost's 256 sessions and the memory compared across rounds are
    this module's alone, and the 1,000 cancelled jobs stay out of other tests' job lists."""
    with stack_pool.private(DEFAULT, name="load") as local:
        yield local


def pid(stack: LocalStack, name: str) -> int:
    return next(p["pid"] for p in stack.status["processes"] if p["name"] == name)


def metrics_url(stack: LocalStack, name: str) -> str:
    return next(p["metrics_url"] for p in stack.status["processes"] if p["name"] == name)


def test_256_sessions_at_once_answer_only_their_own_steps_and_envhost_memory_stays_flat(stack: LocalStack) -> None:
    probe, trend = ProcessProbe(pid(stack, "envhost")), MemoryTrend(name="envhost")

    async def rounds() -> list:
        reports = []
        for index in range(ROUNDS):
            async with sampling({"envhost": probe}, {"envhost": trend}):
                reports.append(await sessions_load(
                    stack.address("envhost"), stack.api_key, sessions=ENVHOST_MAX_SESSIONS, steps=3,
                    metrics_url=metrics_url(stack, "envhost"), envhost_pid=probe.pid, probe_limit=True,
                    seed=index))
        return reports

    for report in asyncio.run(rounds()):
        assert report.problems == []
        assert report.opened == report.closed == ENVHOST_MAX_SESSIONS
        assert report.steps_ok == ENVHOST_MAX_SESSIONS * 3
        assert report.open_at_peak == ENVHOST_MAX_SESSIONS and report.open_after_close == 0
        assert report.limit_refusal.startswith("RESOURCE_EXHAUSTED") and "max_sessions" in report.limit_refusal
        assert report.processes_after <= report.processes_before  # no game process left behind
    assert all(sample.alive for sample in trend.rounds)
    assert trend.flat(BOUND), f"EnvHost RSS grew {trend.growth_bytes / MiB:.1f} MiB: {trend.per_round_mib}"


def test_1000_queued_jobs_are_all_listed_cancelled_and_replayed_exactly(stack: LocalStack) -> None:
    probe = ProcessProbe(pid(stack, "scheduler"))
    report = asyncio.run(queued_jobs_load(stack.address("scheduler"), stack.api_key, jobs=1000, check_every=10))
    assert report.problems == [] and report.lost == 0
    assert report.submitted == report.listed == report.queued_seen == report.cancelled == 1000
    assert report.got_queued == report.events_checked == 100  # every 10th job, read and replayed
    assert report.over_quota_refusal == "RESOURCE_EXHAUSTED"
    assert probe.sample().alive


def test_50_watchers_of_one_job_get_the_same_gap_free_events_and_scheduler_memory_stays_flat(
        stack: LocalStack) -> None:
    probe, trend = ProcessProbe(pid(stack, "scheduler")), MemoryTrend(name="scheduler")

    async def rounds() -> list:
        reports = []
        for _ in range(ROUNDS):
            async with sampling({"scheduler": probe}, {"scheduler": trend}):
                reports.append(await watchers_load(stack.address("scheduler"), stack.api_key, watchers=WATCHERS,
                                                   metrics_url=metrics_url(stack, "scheduler")))
        return reports

    for report in asyncio.run(rounds()):
        assert report.problems == [] and report.lost_events == 0
        assert report.final_state == "STATE_SUCCEEDED" and report.events >= 8
        assert report.identical_watchers == WATCHERS and report.resumed_ok == len(report.resume_points) == 2
        assert report.watch_streams_closed == WATCHERS + 2 * 2  # every stream ended on the server too
    assert trend.flat(BOUND), f"Scheduler RSS grew {trend.growth_bytes / MiB:.1f} MiB: {trend.per_round_mib}"
    # WatchJob's Redis connections are pooled: the pool grows to the streams' peak concurrency
    # (which a loaded machine can raise in any round, once), then is reused; one leaked
    # connection per stream would add 54 in every round, the last two included
    fds = [sample.open_fds for sample in trend.rounds]
    assert min(fds[-1] - fds[-2], fds[-2] - fds[-3]) < WATCHERS // 2, fds
