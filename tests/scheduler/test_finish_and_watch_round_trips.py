"""FinishJob and the start of a WatchJob each read and write Redis in one round trip (issue 22).

FinishJob of a RUNNING job checks the state, the lease (its job, fencing token and expiry) and a
requested cancel, ends the job, releases its leases and reads the ended job back in one script
(FINISH); anything unusual (an ended job retried, a stale lease, no job) changes nothing. A
WatchJob reads the job's state and its stored events in one step (WATCH_FROM) before it follows
the live ones on the shared reader's own connection."""

from __future__ import annotations

import asyncio

import grpc

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_scheduler.model import JobState
from tests.scheduler._harness import (
    FAST,
    ManualClock,
    lease_of,
    reason_of,
    register_pool,
    rpc_error,
    running_job,
    scheduler_server,
)
from tests.scheduler._round_trips import RoundTrips
from tests.scheduler._watch import collect

S = job_pb2.Job


async def load_scripts(h) -> None:  # noqa: ANN001
    """Redis knows the scripts (a first EVALSHA would add SCRIPT LOAD and a retry)."""
    store = h.scheduler.allocator.store
    for script in (store.scripts.finish, store.scripts.watch_from):
        await store.client.script_load(script.script)


def test_finishing_a_running_job_is_one_round_trip_that_ends_it_and_frees_its_leases(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=2, rollout_devices=2)
            done, cancelled = await running_job(h, "done"), await running_job(h, "cancelled")
            await h.stub.CancelJob(pb.CancelJobRequest(job_id=cancelled.job_id))
            await load_scripts(h)
            store, leases = h.scheduler.allocator.store, h.scheduler.jobs.leases
            trips = RoundTrips(store.client)

            succeed = pb.FinishJobRequest(lease=lease_of(done), final_state=S.STATE_SUCCEEDED)
            ended = (await h.stub.FinishJob(succeed)).job
            assert trips.count == 1
            assert ended.state == S.STATE_SUCCEEDED and ended.status_message == "finished: succeeded"
            assert ended.end_time.seconds > 0 and ended.last_event_sequence == done.last_event_sequence + 1
            assert await leases.of_job(done.job_id) == []

            trips.count = 0
            failed = (await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(cancelled), final_state=S.STATE_FAILED,
                                                                 message="stopped"))).job
            assert trips.count == 1
            assert failed.state == S.STATE_CANCELLED and failed.status_message == "stopped"
            assert await leases.of_job(cancelled.job_id) == []
            last = (await collect(h.stub, cancelled.job_id))[-1].state_changed
            assert (last.from_state, last.to_state, last.reason) == (S.STATE_RUNNING, S.STATE_CANCELLED, "stopped")

            again = (await h.stub.FinishJob(succeed)).job
            assert again.state == S.STATE_SUCCEEDED and again.end_time == ended.end_time  # a retry changes nothing

    asyncio.run(scenario())


def test_finish_with_an_expired_or_foreign_lease_changes_nothing(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, clock=clock) as h:
            await register_pool(h, trainer_devices=2, rollout_devices=2)
            first, second = await running_job(h, "first"), await running_job(h, "second")
            foreign = pb.FinishJobRequest(lease=lease_of(second), final_state=S.STATE_SUCCEEDED)
            foreign.lease.job_id = first.job_id  # a real lease, of another job
            error = await rpc_error(h.stub.FinishJob(foreign))
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert reason_of(error) == "ERROR_REASON_STALE_FENCING_TOKEN"

            clock.advance(FAST.worker_ttl_ms + 1)  # no heartbeat renewed the lease: it expired
            error = await rpc_error(h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(first),
                                                                         final_state=S.STATE_SUCCEEDED)))
            assert reason_of(error) == "ERROR_REASON_STALE_FENCING_TOKEN"
            for job in (first, second):
                assert (await h.scheduler.allocator.store.get(job.job_id)).state is JobState.RUNNING

            missing = pb.FinishJobRequest(lease=lease_of(first), final_state=S.STATE_SUCCEEDED)
            missing.lease.job_id = "job-nobody"
            assert (await rpc_error(h.stub.FinishJob(missing))).code() == grpc.StatusCode.NOT_FOUND

    asyncio.run(scenario())


def test_a_watch_reads_the_job_and_its_stored_events_in_one_round_trip(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            job = await running_job(h)
            await load_scripts(h)
            trips = RoundTrips(h.scheduler.allocator.store.client)
            seen: list[job_pb2.JobEvent] = []

            async def follow() -> None:
                async for response in h.stub.WatchJob(pb.WatchJobRequest(job_id=job.job_id)):
                    seen.append(response.event)

            watcher = asyncio.create_task(follow())
            for _ in range(100):
                if len(seen) == 3:
                    break
                await asyncio.sleep(0.02)
            assert [e.state_changed.to_state for e in seen] == [S.STATE_QUEUED, S.STATE_ALLOCATING, S.STATE_RUNNING]
            await asyncio.sleep(0.1)  # now following: live events come on the shared reader's connection
            assert trips.count == 1
            await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(job), final_state=S.STATE_SUCCEEDED))
            await asyncio.wait_for(watcher, 5)
            assert seen[-1].state_changed.to_state == S.STATE_SUCCEEDED

            trips.count = 0
            replayed = await collect(h.stub, job.job_id)  # an ended job: replayed, then closed
            assert trips.count == 1 and [e.sequence for e in replayed] == [1, 2, 3, 4]

    asyncio.run(scenario())
