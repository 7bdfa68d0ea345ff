"""The one-round-trip pass: a job this replica just queued is started on the view the last full
pass left (pass_cache), with START (all or nothing in Redis) as the only authority.

It must decide exactly as full passes would, cost one round trip, never start a job on a slot
taken behind its back, and give way to a full pass whenever its view may be wrong or unfair: too
old, a job left waiting, a wake-up from elsewhere."""

from __future__ import annotations

import asyncio

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_scheduler.model import Role
from tests.scheduler._harness import FAST, Harness, ManualClock, register_pool, register_request, rl_spec, scheduler_server
from tests.scheduler._round_trips import RoundTrips

S = job_pb2.Job


async def submit(h: Harness, request_id: str, trainer_devices: int = 1) -> str:
    spec = rl_spec()
    spec.resources.add(role=resources_pb2.ROLE_TRAINER, device_count=trainer_devices)
    spec.resources.add(role=resources_pb2.ROLE_ROLLOUT, device_count=1)
    return (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=request_id, spec=spec))).job.job_id


async def placement(h: Harness, job_id: str) -> list[tuple[str, tuple[str, ...]]]:
    job = await h.scheduler.allocator.store.get(job_id)
    return sorted((f"{a.role}@{a.worker_id}", a.device_ids) for a in job.assignments) if job.state == "RUNNING" else []


async def warm_up(h: Harness) -> None:
    """A full pass that starts a job, so the cache exists; every script known to Redis."""
    allocator = h.scheduler.allocator
    for name in ("read_pass", "start", "note_waiting"):
        await allocator.store.client.script_load(getattr(allocator.store.scripts, name).script)
    await submit(h, "first")
    await allocator.tick(housekeeping=False)


async def run_sequence(redis_url: str, *, fast: bool) -> list[list[tuple[str, tuple[str, ...]]]]:
    """Jobs of 1, 2, 1, 2 trainer devices, each allocated as soon as it is queued."""
    async with scheduler_server(redis_url, clock=ManualClock()) as h:
        await register_pool(h, trainer_devices=4, rollout_devices=8)
        await h.stub.RegisterWorker(register_request("trainer-2", "trainer", 4))
        await warm_up(h)
        placements = []
        for index, devices in enumerate((1, 2, 1, 2)):
            job_id = await submit(h, f"job-{index}", devices)
            if not fast:
                h.scheduler.allocator._fresh.clear()  # as if queued by another replica: full passes only
            await h.scheduler.allocator.tick(housekeeping=False)
            placements.append(await placement(h, job_id))
        await h.scheduler.allocator.store.client.flushdb()
        return placements


def test_the_one_round_trip_pass_places_jobs_exactly_as_full_passes_do(redis_url: str) -> None:
    async def scenario() -> None:
        fast = await run_sequence(redis_url, fast=True)
        full = await run_sequence(redis_url, fast=False)
        assert all(fast) and fast == full

    asyncio.run(scenario())


def test_a_fresh_job_starts_in_one_round_trip_and_gives_way_to_full_passes(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, clock=clock) as h:
            await register_pool(h, trainer_devices=8, rollout_devices=8)
            await warm_up(h)
            allocator = h.scheduler.allocator
            trips = RoundTrips(allocator.store.client)

            async def started_in(request_id: str) -> int:
                job_id = await submit(h, request_id)
                trips.count = 0
                await allocator.tick(housekeeping=False)
                count = trips.count
                assert (await allocator.store.get(job_id)).state == "RUNNING"
                return count

            assert await started_in("fast-1") == 1
            assert await started_in("fast-2") == 1
            allocator._woken_remotely = True  # e.g. another replica queued a job meanwhile
            assert await started_in("after-remote-wake") == 2
            assert await started_in("fast-3") == 1
            clock.advance(FAST.allocator_interval_ms)  # the view is as old as the interval
            assert await started_in("after-interval") == 2

    asyncio.run(scenario())


def test_a_job_left_waiting_keeps_fresh_jobs_on_full_passes(redis_url: str) -> None:
    """The last full pass could not start a job: a fresh one must not overtake it on a cached
    view (queue order, the starvation guard), so it goes through a full pass."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=2, rollout_devices=2)
            await warm_up(h)
            allocator = h.scheduler.allocator
            big = await submit(h, "big", trainer_devices=2)  # 1 trainer device left: waits
            await allocator.tick(housekeeping=False)
            assert (await allocator.store.get(big)).state == "QUEUED"
            trips = RoundTrips(allocator.store.client)
            small = await submit(h, "small")
            trips.count = 0
            await allocator.tick(housekeeping=False)
            assert trips.count == 2 and (await allocator.store.get(small)).state == "RUNNING"

    asyncio.run(scenario())


def test_a_slot_taken_behind_the_caches_back_is_never_shared(redis_url: str) -> None:
    """The cache thinks trainer-1 cpu:1 is free; another lease took it. START refuses (nothing
    changes), the cache is dropped, and the full pass that follows in the same tick starts the
    job on the slot really free."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=3, rollout_devices=3)
            await warm_up(h)  # the first job holds trainer-1 cpu:0
            allocator = h.scheduler.allocator
            squatter = await allocator.leases.acquire(job_id="other", worker_id="trainer-1", role=Role.TRAINER,
                                                      slots=["cpu:1"], device_ids=["cpu:1"], ttl_ms=FAST.worker_ttl_ms)
            job_id = await submit(h, "late")
            await allocator.tick(housekeeping=False)  # the cached plan (cpu:1) is refused, a full pass follows
            assert dict(await placement(h, job_id))["TRAINER@trainer-1"] == ("cpu:2",)
            events = await h.scheduler.jobs.events.after(job_id, 0)
            assert [str(e.payload.to_state) for e in events] == ["QUEUED", "ALLOCATING", "RUNNING"]
            holders = [lease.lease_id for lease in await allocator.leases.of_worker("trainer-1") if "cpu:1" in lease.slots]
            assert holders == [squatter.lease_id]

    asyncio.run(scenario())
