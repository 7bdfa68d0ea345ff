"""A worker's heartbeat in one script (WORKER_HEARTBEAT): renew the worker and its unexpired
leases and read their jobs in the same step, one round trip however many leases it holds."""

from __future__ import annotations

import asyncio

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_scheduler.model import JobState
from tests.scheduler._harness import FAST, ManualClock, register_pool, rl_spec, scheduler_server
from tests.scheduler._round_trips import RoundTrips


async def heartbeat(h, worker_id: str) -> pb.HeartbeatResponse:  # noqa: ANN001
    return await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id=worker_id))


def test_a_heartbeat_is_one_round_trip_and_renews_only_live_leases(redis_url: str) -> None:
    """Three jobs run on coord-1. One lease has expired (dead for good): the heartbeat neither
    renews nor hands it out. One job ended: its lease is released, not handed out. The third
    is renewed and handed out with its current assignment."""
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, clock=clock) as h:
            await register_pool(h, trainer_devices=3, rollout_devices=3)
            jobs = [(await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=f"j{i}", spec=rl_spec()))).job
                    for i in range(3)]
            await h.scheduler.allocator.tick(housekeeping=False)
            store, leases = h.scheduler.allocator.store, h.scheduler.allocator.leases
            coord = {job.job_id: next(a.lease for a in (await store.get(job.job_id)).assignments
                                      if a.worker_id == "coord-1") for job in jobs}
            await heartbeat(h, "coord-1")  # Redis learns the script
            expired, ended, live = (coord[job.job_id] for job in jobs)
            await store.client.hset(store.keys.lease(expired.lease_id), "expire_at", clock.now - 1)
            await h.scheduler.allocator.lifecycle.end(jobs[1].job_id, expected=JobState.RUNNING,
                                                      to=JobState.FAILED, reason="test")
            clock.advance(10)

            trips = RoundTrips(store.client)
            answer = await heartbeat(h, "coord-1")
            assert trips.count == 1  # the ended job's lease went with its transition: nothing to release
            assert [a.lease.lease_id for a in answer.assignments] == [live.lease_id]
            assert list(answer.stop_job_ids) == []
            assert (await leases.get(live.lease_id)).expire_time_ms == clock.now + FAST.worker_ttl_ms
            assert (await leases.get(expired.lease_id)).expire_time_ms == clock.now - 11
            assert await leases.get(ended.lease_id) is None

    asyncio.run(scenario())


def test_a_heartbeat_releases_a_lease_whose_job_moved_on(redis_url: str) -> None:
    """A lease left behind by an earlier attempt (its job no longer lists it) is released by the
    worker's next heartbeat and never handed out."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            job = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="j", spec=rl_spec()))).job
            await h.scheduler.allocator.tick(housekeeping=False)
            leases = h.scheduler.allocator.leases
            orphan = await leases.acquire(job_id=job.job_id, worker_id="coord-1", role="COORDINATOR",
                                          slots=["slot:5"], device_ids=[], ttl_ms=FAST.worker_ttl_ms)
            answer = await heartbeat(h, "coord-1")
            assert orphan.lease_id not in {a.lease.lease_id for a in answer.assignments}
            assert len(answer.assignments) == 1
            assert await leases.get(orphan.lease_id) is None

    asyncio.run(scenario())
