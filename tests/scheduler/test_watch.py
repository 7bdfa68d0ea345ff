"""WatchJob: replay, live events, resuming with after_sequence, closing after the terminal event."""

from __future__ import annotations

import asyncio
import dataclasses

import grpc

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.core.redis_store import connect
from tests.scheduler._harness import FAST, lease_of, register_pool, rl_spec, rpc_error, running_job, scheduler_server
from tests.scheduler._watch import collect

S = job_pb2.Job


def metrics_event(step: int, reward: float) -> job_pb2.JobEvent:
    return job_pb2.JobEvent(metrics=job_pb2.MetricsReported(step=step, values={"reward/mean": reward}))


def test_watch_replays_then_follows_live_and_closes_after_the_terminal_event(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)
            watcher = asyncio.create_task(collect(h.stub, job.job_id))
            await asyncio.sleep(0.3)  # the watcher has replayed and now blocks on XREAD
            assert not watcher.done()
            lease = lease_of(job)
            for step in (1, 2):
                await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(
                    lease=lease, events=[metrics_event(step, 0.1 * step)]))
            await h.stub.FinishJob(pb.FinishJobRequest(lease=lease, final_state=S.STATE_SUCCEEDED,
                                                       message="done"))
            events = await asyncio.wait_for(watcher, 5)
            assert [e.sequence for e in events] == list(range(1, len(events) + 1))
            kinds = [e.WhichOneof("payload") for e in events]
            assert kinds == ["state_changed"] * 3 + ["metrics"] * 2 + ["state_changed"]
            states = [e.state_changed.to_state for e in events if e.HasField("state_changed")]
            assert states == [S.STATE_QUEUED, S.STATE_ALLOCATING, S.STATE_RUNNING, S.STATE_SUCCEEDED]
            assert events[-1].state_changed.reason == "done" and events[3].metrics.step == 1
            assert all(e.job_id == job.job_id and e.time.seconds > 0 for e in events)

            resumed = await collect(h.stub, job.job_id, after=4)
            assert [e.sequence for e in resumed] == [5, 6]
            assert await collect(h.stub, job.job_id, after=6) == []
            final = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            assert final.last_event_sequence == 6
            assert final.progress.latest_metrics["reward/mean"] == 0.2

    asyncio.run(scenario())


def test_each_agents_latest_metrics_are_kept_apart(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)
            events = [job_pb2.JobEvent(metrics=job_pb2.MetricsReported(step=1, agent_id=agent, values={"elo": elo}))
                      for agent, elo in (("alpha", 1008.0), ("beta", 992.0))]
            await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=lease_of(job), events=events))
            latest = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job.progress.latest_metrics
            assert (latest["alpha/elo"], latest["beta/elo"]) == (1008.0, 992.0) and "elo" not in latest

    asyncio.run(scenario())


def test_follow_after_end_keeps_the_stream_open(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            job = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="f", spec=rl_spec()))).job
            await h.stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id))
            assert len(await collect(h.stub, job.job_id)) == 2
            error = await rpc_error(collect(h.stub, job.job_id, follow=True, timeout=0.6))
            assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    asyncio.run(scenario())


def test_watch_unknown_job_is_not_found_and_negative_sequence_invalid(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            error = await rpc_error(collect(h.stub, "job-missing"))
            assert error.code() == grpc.StatusCode.NOT_FOUND
            job = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="n", spec=rl_spec()))).job
            error = await rpc_error(collect(h.stub, job.job_id, after=-1))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "after_sequence" in error.details()

    asyncio.run(scenario())


def test_a_job_keeps_its_latest_events_and_watching_from_a_trimmed_position_is_out_of_range(redis_url: str) -> None:
    async def scenario() -> None:
        config = dataclasses.replace(FAST, max_events_per_job=6)
        async with scheduler_server(redis_url, config=config) as h:
            await register_pool(h)
            job = await running_job(h)  # events 1-3: QUEUED, ALLOCATING, RUNNING
            await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(
                lease=lease_of(job), events=[metrics_event(step, 0.0) for step in range(1, 8)]))  # 4-10
            async with connect(redis_url) as client:
                assert await client.xlen(f"ot:job:{job.job_id}:events") == 6
            error = await rpc_error(collect(h.stub, job.job_id, follow=True, timeout=1.0))
            assert error.code() == grpc.StatusCode.OUT_OF_RANGE
            assert error.details() == (f"events 1..4 of job {job.job_id} were trimmed (a job keeps its last 6 "
                                       "events); watch again with after_sequence >= 4")
            watcher = asyncio.create_task(collect(h.stub, job.job_id, after=7))
            await asyncio.sleep(0.2)
            await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(job), final_state=S.STATE_SUCCEEDED))
            events = await asyncio.wait_for(watcher, 5)
            assert [e.sequence for e in events] == [8, 9, 10, 11]  # no gap, no duplicate

    asyncio.run(scenario())


def test_a_job_ending_right_after_the_replay_still_delivers_its_terminal_event(redis_url: str) -> None:
    """The race the scheduler bench found: replay ends, the job ends, then the watcher looks."""
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)
            events = h.scheduler.jobs.events
            replay = events.replay_from

            async def replay_then_finish(job_id, first, *, count):  # noqa: ANN001, ANN202
                async for event in replay(job_id, first, count=count):
                    yield event
                await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(job), final_state=S.STATE_SUCCEEDED))

            object.__setattr__(events, "replay_from", replay_then_finish)
            try:
                seen = await asyncio.wait_for(collect(h.stub, job.job_id), 3)
            finally:
                object.__setattr__(events, "replay_from", replay)
            assert seen[-1].state_changed.to_state == S.STATE_SUCCEEDED
            assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))

    asyncio.run(scenario())


async def write_calls(client) -> int:  # noqa: ANN001
    """Redis's own count of changes to the dataset (the test server never saves an RDB, so it
    only grows): whatever the commands or scripts, a write moves it."""
    return int((await client.info("persistence"))["rdb_changes_since_last_save"])


def test_many_watchers_of_one_job_cost_no_redis_writes(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h, connect(redis_url) as client:
            await register_pool(h)
            job = await running_job(h)
            before = await write_calls(client)
            watchers = [asyncio.create_task(collect(h.stub, job.job_id, follow=True, timeout=1.5)) for _ in range(20)]
            results = await asyncio.gather(*watchers, return_exceptions=True)
            assert all(isinstance(r, grpc.aio.AioRpcError) and r.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                       for r in results)  # they were all following until their deadline
            assert await write_calls(client) == before

    asyncio.run(scenario())


def test_a_newly_followed_job_wakes_the_shared_read_without_a_new_redis_connection(redis_url: str) -> None:
    """The hub's one blocking XREAD covers every followed job; a watcher of another job wakes it
    (an XADD to the hub's wake stream) instead of cancelling it, which would drop and reopen its
    connection for every new watcher. With a 10 s block, a job left out of the read until the
    block ended would get its events 10 s late."""
    async def scenario() -> None:
        slow_block = dataclasses.replace(FAST, watch_block_ms=10_000)
        async with scheduler_server(redis_url, config=slow_block) as h, connect(redis_url) as client:
            jobs = [(await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=f"w{i}", spec=rl_spec()))).job.job_id
                    for i in range(6)]
            watchers = [asyncio.create_task(collect(h.stub, jobs[0], timeout=8))]
            await asyncio.sleep(0.3)  # the hub's read is in flight
            connections = int((await client.info("stats"))["total_connections_received"])
            for job_id in jobs[1:]:  # each new job is followed while a read is in flight
                watchers.append(asyncio.create_task(collect(h.stub, job_id, timeout=8)))
                await asyncio.sleep(0.1)
            started = asyncio.get_running_loop().time()
            for job_id in reversed(jobs):
                await h.stub.CancelJob(pb.CancelJobRequest(job_id=job_id, reason="test"))
            streams = await asyncio.wait_for(asyncio.gather(*watchers), 5)
            assert asyncio.get_running_loop().time() - started < 2, "a watcher waited for the read's block to end"
            assert all(events[-1].state_changed.to_state == S.STATE_CANCELLED for events in streams)
            opened = int((await client.info("stats"))["total_connections_received"]) - connections
            assert opened <= 2, f"{opened} Redis connections opened for 5 new watchers"

    asyncio.run(scenario())
