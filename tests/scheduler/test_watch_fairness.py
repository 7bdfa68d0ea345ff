"""Fair, bounded WatchJob streams: one Redis reader however many watchers, a per-tenant cap on
live streams, and a full connection pool reported as a busy scheduler, never as a Redis outage.

Issue 20, hole 5: about 88 live watchers exhausted the Redis client's 100-connection pool (one
XREAD BLOCK connection each) and from then on every tenant's watch failed as "Redis unavailable".
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.api_keys import new_api_key
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.core.redis_store import connect
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_scheduler.app import build_scheduler
from opentinker_runtime.edge.convert import lease_from_proto
from opentinker_scheduler.events import MetricsReported
from opentinker_scheduler.model import Caller, JobState
from opentinker_scheduler.servicer import scheduler_service_binding
from opentinker_scheduler.settings import SchedulerSettings
from tests.scheduler._harness import (
    FAST,
    eventually,
    lease_of,
    reason_of,
    register_pool,
    register_request,
    rl_spec,
    rpc_error,
    running_job,
    scheduler_server,
)

S = job_pb2.Job
ADMIN_KEY = new_api_key()
CAP = 64


async def new_tenant_stub(h, tenant_id: str) -> tuple[grpc.aio.Channel, pb_grpc.SchedulerServiceStub]:  # noqa: ANN001
    secret = (await h.stub.CreateTenant(pb.CreateTenantRequest(tenant_id=tenant_id))).api_key_secret
    channel = authenticated_channel(h.address, secret)
    return channel, pb_grpc.SchedulerServiceStub(channel)


async def follow(stub, job_id: str, into: list[job_pb2.JobEvent], *, after: int = 0,  # noqa: ANN001
                 follow_after_end: bool = False) -> list[job_pb2.JobEvent]:
    """Append the job's events to `into` as they arrive; `into` once the stream ends."""
    request = pb.WatchJobRequest(job_id=job_id, after_sequence=after, follow_after_end=follow_after_end)
    async for response in stub.WatchJob(request, timeout=30):
        into.append(response.event)
    return into


async def xread_connections(client) -> int:  # noqa: ANN001
    """Redis connections whose last command was XREAD (WatchJob's blocking readers)."""
    return sum(1 for entry in await client.client_list() if entry.get("cmd") == "xread")


async def until(condition, *, timeout: float = 5.0) -> None:  # noqa: ANN001
    """Wait until the synchronous `condition()` holds."""
    async def check() -> bool:
        return bool(condition())
    await eventually(check, timeout=timeout)


def metrics(step: int) -> job_pb2.JobEvent:
    return job_pb2.JobEvent(metrics=job_pb2.MetricsReported(step=step, values={"loss": 1.0 / step}))


def test_300_watchers_of_one_tenant_do_not_break_another_tenants_watch(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h, connect(redis_url) as redis:
            a_channel, tenant_a = await new_tenant_stub(h, "flooder")
            b_channel, tenant_b = await new_tenant_stub(h, "bystander")
            async with a_channel, b_channel:
                a_job = (await tenant_a.SubmitJob(pb.SubmitJobRequest(request_id="a", spec=rl_spec()))).job
                a_streams: list[list[job_pb2.JobEvent]] = [[] for _ in range(300)]
                floods = [asyncio.create_task(follow(tenant_a, a_job.job_id, into, follow_after_end=True))
                          for into in a_streams]
                await until(lambda: all(t.done() or into for t, into in zip(floods, a_streams)), timeout=20)
                await asyncio.sleep(0.3)  # the accepted ones are past their replay, following live

                await register_pool(h)  # now: the workers' liveness does not depend on the flood's pace
                for worker_id, role in (("trainer-2", "trainer"), ("rollout-2", "rollout")):  # room for both jobs
                    await h.stub.RegisterWorker(register_request(worker_id, role))
                b_job = (await tenant_b.SubmitJob(pb.SubmitJobRequest(request_id="b", spec=rl_spec()))).job
                await h.scheduler.allocator.tick()
                b_job = (await h.stub.GetJob(pb.GetJobRequest(job_id=b_job.job_id))).job
                assert (await tenant_b.GetJob(pb.GetJobRequest(job_id=b_job.job_id))).job.state == S.STATE_RUNNING
                seen: list[job_pb2.JobEvent] = []
                b_watch = asyncio.create_task(follow(tenant_b, b_job.job_id, seen))
                await until(lambda: len(seen) >= 3 or b_watch.done())  # QUEUED, ALLOCATING, RUNNING
                assert not b_watch.done(), b_watch.exception()
                # the Coordinator's reports, made in the domain (the job-token guard is not under test)
                lease, service = lease_from_proto(lease_of(b_job)), Caller(tenant_id="default", admin=True)
                await h.scheduler.jobs.report(lease, [MetricsReported(step=1, values={"loss": 1.0})],
                                              caller=service, request_id="")
                await h.scheduler.jobs.finish(lease, JobState.SUCCEEDED, caller=service, message="done")
                events = await asyncio.wait_for(b_watch, 10)
                assert [e.sequence for e in events] == [1, 2, 3, 4, 5]
                assert events[3].metrics.step == 1 and events[4].state_changed.to_state == S.STATE_SUCCEEDED

                refused = [t.exception() for t in floods if t.done()]
                assert len(refused) == 300 - CAP, f"{len(refused)} refused"
                assert {e.code() for e in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
                assert refused[0].details() == (
                    f"tenant flooder already has {CAP} live WatchJob streams on this scheduler, its cap "
                    f"(OPENTINKER_SCHEDULER_MAX_WATCH_STREAMS_PER_TENANT={CAP}); end some watches first")
                assert reason_of(refused[0]) == "ERROR_REASON_STREAM_LIMIT"
                assert await xread_connections(redis) <= 1  # 64 followers, one blocking reader

                for flood in floods:
                    flood.cancel()
                await asyncio.gather(*floods, return_exceptions=True)
                again: list[job_pb2.JobEvent] = []
                rewatch = asyncio.create_task(follow(tenant_a, a_job.job_id, again, follow_after_end=True))
                await until(lambda: len(again) >= 1)  # ended streams give their places back
                rewatch.cancel()
                await asyncio.gather(rewatch, return_exceptions=True)

    asyncio.run(scenario())


def test_many_watchers_of_one_job_share_one_reader_and_get_identical_gap_free_streams(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h, connect(redis_url) as redis:
            await register_pool(h)
            job = await running_job(h)
            streams: list[list[job_pb2.JobEvent]] = [[] for _ in range(40)]
            watchers = [asyncio.create_task(follow(h.stub, job.job_id, into)) for into in streams]
            await until(lambda: all(len(into) >= 3 for into in streams))
            await asyncio.sleep(0.3)  # past the replay: every watcher now follows live
            assert await xread_connections(redis) <= 1
            for batch in range(5):
                await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(
                    lease=lease_of(job), events=[metrics(batch * 10 + i + 1) for i in range(10)]))
            await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(job), final_state=S.STATE_SUCCEEDED))
            results = await asyncio.wait_for(asyncio.gather(*watchers), 10)
            expected = list(range(1, 3 + 50 + 2))
            assert all([e.sequence for e in events] == expected for events in results)
            assert all(events == results[0] for events in results)

    asyncio.run(scenario())


def test_a_slow_watcher_rereads_what_it_missed_from_redis_without_a_gap(redis_url: str) -> None:
    async def scenario() -> None:
        config = dataclasses.replace(FAST, watch_queue_events=4)
        async with scheduler_server(redis_url, config=config) as h:
            await register_pool(h)
            job = await running_job(h)
            caller = Caller(tenant_id="default", admin=True)
            slow = h.scheduler.jobs.watch(job.job_id, caller, after_sequence=0, follow_after_end=False)
            seen = [await anext(slow) for _ in range(3)]
            fast_events: list[job_pb2.JobEvent] = []
            fast = asyncio.create_task(follow(h.stub, job.job_id, fast_events))
            first_live = asyncio.create_task(anext(slow))
            await asyncio.sleep(0.3)  # the slow watcher now waits for live events, then stops reading
            for step in range(1, 41):
                await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=lease_of(job), events=[metrics(step)]))
            await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(job), final_state=S.STATE_SUCCEEDED))
            await asyncio.wait_for(fast, 10)
            seen.append(await first_live)
            seen += [event async for event in slow]
            assert [e.sequence for e in seen] == list(range(1, 45))
            assert [e.sequence for e in fast_events] == list(range(1, 45))  # the fast one was not held back

    asyncio.run(scenario())


def test_the_watch_cap_is_a_setting_and_admin_keys_have_their_own(redis_url: str) -> None:
    settings = SchedulerSettings(max_watch_streams_per_tenant=3, max_admin_watch_streams=5, auth="disabled")
    config = settings.domain_config()
    assert (config.max_watch_streams_per_tenant, config.max_admin_watch_streams) == (3, 5)

    async def scenario() -> None:
        async with scheduler_server(redis_url, config=config) as h:  # auth off: callers are admins
            job = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="c", spec=rl_spec()))).job
            streams = [asyncio.create_task(follow(h.stub, job.job_id, [], follow_after_end=True)) for _ in range(5)]
            await asyncio.sleep(0.5)
            assert not any(s.done() for s in streams)
            error = await rpc_error(follow(h.stub, job.job_id, [], follow_after_end=True))
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "OPENTINKER_SCHEDULER_MAX_ADMIN_WATCH_STREAMS=5" in error.details()
            for stream in streams:
                stream.cancel()
            await asyncio.gather(*streams, return_exceptions=True)

    asyncio.run(scenario())


@asynccontextmanager
async def scheduler_with_pool(redis_url: str, *,
                              pool_size: int) -> AsyncIterator[tuple[object, pb_grpc.SchedulerServiceStub]]:
    """A scheduler whose state-store client has `pool_size` connections and waits 0.2 s for one."""
    client = connect(redis_url, max_connections=pool_size, pool_timeout=0.2)
    blocking = connect(redis_url, socket_timeout=None)
    scheduler = build_scheduler(client, blocking, config=FAST)
    started = await start_server(SchedulerSettings(port=0, auth="disabled"),
                                 ServerPlan(services=[scheduler_service_binding(scheduler)], admin_only=False))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{started.port}")
    try:
        yield client, pb_grpc.SchedulerServiceStub(channel)
    finally:
        await channel.close()
        await stop_server(started, grace_seconds=0.2)
        await client.aclose()
        await blocking.aclose()


def test_a_full_connection_pool_is_reported_as_a_busy_scheduler_not_a_redis_outage(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_with_pool(redis_url, pool_size=1) as (client, stub):
            job = (await stub.SubmitJob(pb.SubmitJobRequest(request_id="p", spec=rl_spec()))).job
            held = await client.connection_pool.get_connection()
            try:
                error = await rpc_error(stub.GetJob(pb.GetJobRequest(job_id=job.job_id)))
            finally:
                await client.connection_pool.release(held)
            assert error.code() == grpc.StatusCode.UNAVAILABLE
            assert "Redis) is unavailable" not in error.details()
            assert error.details() == ("the scheduler is busy: all 1 of its connections to the state store "
                                       "(Redis) stayed in use for 0.2 s; Redis itself is fine, retry shortly")
            assert (await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job.job_id == job.job_id

    asyncio.run(scenario())


def test_a_watcher_joining_a_job_the_reader_is_already_past_reads_the_gap_from_redis(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)  # events 1-3
            events = h.scheduler.jobs.events
            first = events.follow(job.job_id, 3)
            first_live = asyncio.create_task(anext(first))
            await asyncio.sleep(0.2)
            await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(
                lease=lease_of(job), events=[metrics(step) for step in range(1, 6)]))  # 4-8
            assert (await asyncio.wait_for(first_live, 5)).sequence == 4  # the reader is now at 8
            late = events.follow(job.job_id, 3)  # joins behind the reader
            head = [(await asyncio.wait_for(anext(late), 5)).sequence for _ in range(5)]
            await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=lease_of(job), events=[metrics(6)]))
            assert head + [(await asyncio.wait_for(anext(late), 5)).sequence] == [4, 5, 6, 7, 8, 9]
            assert [(await anext(first)).sequence for _ in range(5)] == [5, 6, 7, 8, 9]
            await first.aclose()
            await late.aclose()
            assert events.hub.followers == 0

    asyncio.run(scenario())
