"""Start at submit: a job that fits the view the allocator's last full pass left is started by
SubmitJob itself, its START sent in the same Redis round trip as its SUBMIT (one pipeline).

It must place jobs exactly as passes would, answer with the job as stored (RUNNING, with its
assignments and token), never start a job on a slot taken behind the view's back, never overtake
a job already waiting, never start anything for a request it did not create, and give way to the
allocator whenever its view may be wrong: too old, refused, another replica holding the lock."""

from __future__ import annotations

import asyncio
import dataclasses

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_scheduler.model import JobState, Quota, QueuedJob, ResourceRequest, Role, Tenant
from tests.scheduler._harness import (FAST, Harness, ManualClock, lease_of, register_pool, register_request, rl_spec,
                                     scheduler_server)
from tests.scheduler._round_trips import RoundTrips

S = job_pb2.Job
AT_SUBMIT = dataclasses.replace(FAST, start_at_submit=True)


async def submit(h: Harness, request_id: str, trainer_devices: int = 1) -> job_pb2.Job:
    spec = rl_spec()
    spec.resources.add(role=resources_pb2.ROLE_TRAINER, device_count=trainer_devices)
    spec.resources.add(role=resources_pb2.ROLE_ROLLOUT, device_count=1)
    return (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=request_id, spec=spec))).job


async def warm_up(h: Harness) -> None:
    """Every script known to Redis, then a full pass (the queue empty: it reads the workers)."""
    allocator = h.scheduler.allocator
    for name in ("read_pass", "start", "submit", "note_waiting"):
        await allocator.store.client.script_load(getattr(allocator.store.scripts, name).script)
    await allocator.tick(housekeeping=False)


async def placement(h: Harness, job_id: str) -> list[tuple[str, tuple[str, ...]]]:
    job = await h.scheduler.allocator.store.get(job_id)
    return sorted((f"{a.role}@{a.worker_id}", a.device_ids) for a in job.assignments) if job.state == "RUNNING" else []


async def busy_slots(h: Harness, *workers: str) -> dict[str, set[str]]:
    return {w: await h.scheduler.allocator.leases.busy_slots(w) for w in workers}


def test_a_job_that_fits_comes_back_running_from_one_round_trip(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, config=AT_SUBMIT, clock=clock) as h:
            await register_pool(h, trainer_devices=4, rollout_devices=4)
            await warm_up(h)
            trips = RoundTrips(h.scheduler.allocator.store.client)
            job = await submit(h, "first")
            assert trips.count == 1
            assert job.state == S.STATE_RUNNING and job.queue_position == 0 and job.attempt == 1
            stored = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            assert job.assignments == stored.assignments and len(job.assignments) == 3
            assert all(a.lease.fencing_token > 0 for a in job.assignments)
            assert job.last_event_sequence == stored.last_event_sequence == 3
            assert job.start_time == stored.start_time == job.create_time
            assert stored.state == S.STATE_RUNNING
            events = await h.scheduler.jobs.events.after(job.job_id, 0)
            assert [str(e.payload.to_state) for e in events] == ["QUEUED", "ALLOCATING", "RUNNING"]

    asyncio.run(scenario())


async def placements_of(redis_url: str, *, at_submit: bool) -> list[list[tuple[str, tuple[str, ...]]]]:
    """Jobs of 1, 2, 1, 2 trainer devices on two trainers, each started as soon as it is queued."""
    async with scheduler_server(redis_url, config=AT_SUBMIT if at_submit else FAST, clock=ManualClock()) as h:
        await register_pool(h, trainer_devices=4, rollout_devices=8)
        await h.stub.RegisterWorker(register_request("trainer-2", "trainer", 4))
        await warm_up(h)
        placements = []
        for index, devices in enumerate((1, 2, 1, 2)):
            job = await submit(h, f"job-{index}", devices)
            assert (job.state == S.STATE_RUNNING) == at_submit
            await h.scheduler.allocator.tick(housekeeping=False)
            placements.append(await placement(h, job.job_id))
        await h.scheduler.allocator.store.client.flushdb()
        return placements


def test_jobs_are_placed_exactly_as_passes_place_them(redis_url: str) -> None:
    async def scenario() -> None:
        at_submit = await placements_of(redis_url, at_submit=True)
        by_passes = await placements_of(redis_url, at_submit=False)
        assert all(at_submit) and at_submit == by_passes

    asyncio.run(scenario())


def test_no_view_or_a_job_left_waiting_sends_the_job_to_the_allocator(redis_url: str) -> None:
    """Before any pass there is no view; a job the last pass left waiting must not be overtaken
    by a fresh one (queue order, the starvation guard)."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, config=AT_SUBMIT, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=2, rollout_devices=2)
            allocator = h.scheduler.allocator
            cold = await submit(h, "cold")
            assert cold.state == S.STATE_QUEUED and cold.queue_position == 1
            await allocator.tick(housekeeping=False)
            big = await submit(h, "big", trainer_devices=2)  # 1 trainer device left: it waits
            assert big.state == S.STATE_QUEUED
            await allocator.tick(housekeeping=False)
            small = await submit(h, "small")  # would fit, but `big` waits
            assert small.state == S.STATE_QUEUED
            await allocator.tick(housekeeping=False)
            assert (await allocator.store.get(small.job_id)).state == "RUNNING"
            assert (await allocator.store.get(big.job_id)).state == "QUEUED"

    asyncio.run(scenario())


def test_an_old_view_or_a_pending_wake_up_sends_the_job_to_the_allocator(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, config=AT_SUBMIT, clock=clock) as h:
            await register_pool(h, trainer_devices=8, rollout_devices=8)
            await warm_up(h)
            allocator = h.scheduler.allocator
            assert (await submit(h, "fresh")).state == S.STATE_RUNNING
            clock.advance(AT_SUBMIT.allocator_interval_ms)
            assert (await submit(h, "old-view")).state == S.STATE_QUEUED
            await allocator.tick(housekeeping=False)
            assert (await submit(h, "renewed")).state == S.STATE_RUNNING
            allocator._woken_remotely = True  # another replica queued or freed something
            assert (await submit(h, "after-wake-up")).state == S.STATE_QUEUED
            await allocator.tick(housekeeping=False)
            assert (await submit(h, "after-the-pass")).state == S.STATE_RUNNING

    asyncio.run(scenario())


def test_a_slot_taken_behind_the_views_back_is_never_shared(redis_url: str) -> None:
    """The view thinks trainer-1 cpu:0 is free; another lease took it. START refuses with nothing
    changed, the job is queued, and the full pass that follows starts it on a slot really free."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, config=AT_SUBMIT, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=3, rollout_devices=3)
            await warm_up(h)
            allocator = h.scheduler.allocator
            squatter = await allocator.leases.acquire(job_id="other", worker_id="trainer-1", role=Role.TRAINER,
                                                      slots=["cpu:0"], device_ids=["cpu:0"], ttl_ms=FAST.worker_ttl_ms)
            job = await submit(h, "late")
            assert job.state == S.STATE_QUEUED and job.assignments == []
            assert await busy_slots(h, "trainer-1", "rollout-1") == {"trainer-1": {"cpu:0"}, "rollout-1": set()}
            await allocator.tick(housekeeping=False)
            assert dict(await placement(h, job.job_id))["TRAINER@trainer-1"] == ("cpu:1",)
            holders = [lease.lease_id for lease in await allocator.leases.of_worker("trainer-1") if "cpu:0" in lease.slots]
            assert holders == [squatter.lease_id]
            events = await h.scheduler.jobs.events.after(job.job_id, 0)
            assert [str(e.payload.to_state) for e in events] == ["QUEUED", "ALLOCATING", "RUNNING"]

    asyncio.run(scenario())


def test_a_repeated_request_starts_nothing_and_holds_no_slot(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, config=AT_SUBMIT, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=2, rollout_devices=2)
            await warm_up(h)
            first = await submit(h, "same")
            assert first.state == S.STATE_RUNNING
            again = await submit(h, "same")
            assert again.job_id == first.job_id and again.state == S.STATE_RUNNING
            listed = await h.stub.ListJobs(pb.ListJobsRequest())
            assert [j.job_id for j in listed.jobs] == [first.job_id]
            assert await busy_slots(h, "trainer-1", "rollout-1") == {"trainer-1": {"cpu:0"}, "rollout-1": {"cpu:0"}}
            await h.scheduler.allocator.tick(housekeeping=False)
            assert (await submit(h, "next")).state == S.STATE_RUNNING  # the view was read again
            assert await busy_slots(h, "trainer-1", "rollout-1") == {"trainer-1": {"cpu:0", "cpu:1"},
                                                                     "rollout-1": {"cpu:0", "cpu:1"}}

    asyncio.run(scenario())


def test_the_tenants_quota_is_enforced_at_submit_too(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, config=AT_SUBMIT, clock=ManualClock()) as h:
            await h.scheduler.tenant_admin.tenants.create(Tenant(tenant_id="default", quota=Quota(max_concurrent_jobs=1)))
            await register_pool(h, trainer_devices=4, rollout_devices=4)
            await warm_up(h)
            assert (await submit(h, "one")).state == S.STATE_RUNNING
            second = await submit(h, "two")
            assert second.state == S.STATE_QUEUED
            await h.scheduler.allocator.tick(housekeeping=False)
            waiting = (await h.stub.GetJob(pb.GetJobRequest(job_id=second.job_id))).job
            assert waiting.state == S.STATE_QUEUED and "max_concurrent_jobs" in waiting.status_message

    asyncio.run(scenario())


def test_devices_freed_are_seen_by_the_next_pass_even_with_an_empty_queue(redis_url: str) -> None:
    """A pass that finds the queue empty still reads the workers (one round trip), so the job
    submitted after it starts on the devices that the last one freed."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, config=AT_SUBMIT, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=1, rollout_devices=1)
            await warm_up(h)
            allocator = h.scheduler.allocator
            first = await submit(h, "first")
            assert first.state == S.STATE_RUNNING
            await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(first), final_state=S.STATE_SUCCEEDED))
            trips = RoundTrips(allocator.store.client)
            await allocator.tick(housekeeping=False)
            assert trips.count == 1
            second = await submit(h, "second")
            assert second.state == S.STATE_RUNNING
            assert sorted((a.worker_id, tuple(a.device_ids)) for a in second.assignments) == sorted(
                (a.worker_id, tuple(a.device_ids)) for a in first.assignments)

    asyncio.run(scenario())


def queued(job_id: str) -> QueuedJob:
    return QueuedJob(job_id=job_id, tenant_id="default", state=JobState.QUEUED, device_count=2, create_time_ms=0,
                     resources=(ResourceRequest(role=Role.TRAINER), ResourceRequest(role=Role.ROLLOUT)))


def test_a_start_in_flight_while_a_pass_reads_keeps_its_slots_out_of_the_new_view(redis_url: str) -> None:
    """The pass's read may reach Redis before a START planned at submit: the view it leaves must
    not offer that START's slots again (else the next submission plans them, and is refused)."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, config=AT_SUBMIT, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=2, rollout_devices=2)
            await warm_up(h)
            allocator = h.scheduler.allocator
            in_flight = allocator.draft_admission(queued("in-flight"))
            assert in_flight is not None
            await allocator.tick(housekeeping=False)  # reads both trainer slots as free
            after = allocator.draft_admission(queued("after"))
            assert after is not None
            assert {d.slots for d in after.drafts}.isdisjoint({d.slots for d in in_flight.drafts})
            assert allocator.draft_admission(queued("third")) is None  # 2 devices, both planned

    asyncio.run(scenario())


def test_only_the_replica_holding_the_allocator_lock_starts_at_submit(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, config=AT_SUBMIT, clock=clock) as a, \
                scheduler_server(redis_url, config=AT_SUBMIT, clock=clock) as b:
            await register_pool(a, trainer_devices=4, rollout_devices=4)
            await warm_up(a)
            await b.scheduler.allocator.tick(housekeeping=False)  # the lock is a's: b keeps no view
            assert b.scheduler.allocator._cache is None
            assert (await submit(b, "via-b")).state == S.STATE_QUEUED
            assert (await submit(a, "via-a")).state == S.STATE_RUNNING

    asyncio.run(scenario())


def test_switched_off_every_job_waits_for_a_pass(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, config=FAST, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=4, rollout_devices=4)
            await warm_up(h)
            job = await submit(h, "queued")
            assert job.state == S.STATE_QUEUED
            await h.scheduler.allocator.tick(housekeeping=False)
            assert (await h.scheduler.allocator.store.get(job.job_id)).state == "RUNNING"

    asyncio.run(scenario())
