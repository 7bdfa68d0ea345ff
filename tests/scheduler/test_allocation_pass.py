"""The allocator's hot path: one round trip to read a pass (READ_PASS), one to start every job it
planned (pipelined STARTs), a submission waking its own replica without a pub/sub hop.

Each test checks a guarantee the faster path must keep: the one-step read sees exactly what
plain reads see, every START stays all-or-nothing on its own inside a batch, no slot goes to two
jobs, a lost script is reloaded without starting anything twice, and another replica's wake-ups
still arrive.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter


from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.core.redis_store import connect
from opentinker_scheduler.allocator import Allocator
from opentinker_scheduler.job_store import Start
from opentinker_scheduler.leases import LeaseDraft
from opentinker_scheduler.model import JobType, Quota, Role, Tenant, WorkerState
from opentinker_scheduler.queue_view import queued_job
from tests.scheduler._harness import (
    FAST,
    Harness,
    ManualClock,
    eventually,
    register_pool,
    register_request,
    rl_spec,
    scheduler_server,
)
from tests.scheduler._round_trips import RoundTrips

S = job_pb2.Job


async def submit(h: Harness, request_id: str) -> job_pb2.Job:
    return (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=request_id, spec=rl_spec()))).job


async def state(h: Harness, job_id: str) -> int:
    return (await h.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job.state


def test_a_pass_that_starts_several_jobs_costs_two_round_trips(redis_url: str) -> None:
    """One round trip reads the pass, one starts all of its jobs and notes why the others wait
    (it was 2 + one per job + one for the notes)."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=5, rollout_devices=5)
            allocator = h.scheduler.allocator
            await submit(h, "warm-up")
            await allocator.tick(housekeeping=False)
            for name in ("read_pass", "start", "note_waiting"):  # Redis knows them (no NOSCRIPT + SCRIPT LOAD)
                await allocator.store.client.script_load(getattr(allocator.store.scripts, name).script)
            jobs = [await submit(h, f"job-{i}") for i in range(5)]
            trips = RoundTrips(allocator.store.client)
            await allocator.tick(housekeeping=False)
            assert trips.count == 2  # the job that waits has its status message written in the second
            assert [await state(h, job.job_id) for job in jobs] == [S.STATE_RUNNING] * 4 + [S.STATE_QUEUED]
            waiting = (await h.stub.GetJob(pb.GetJobRequest(job_id=jobs[4].job_id))).job
            assert waiting.status_message.startswith("waiting for 1 trainer slot")
            trips.count = 0
            await allocator.tick(housekeeping=False)  # nothing queued: the read alone
            assert trips.count == 1

    asyncio.run(scenario())


def test_the_one_step_read_sees_what_plain_reads_see(redis_url: str) -> None:
    """READ_PASS against the records read one by one: alive workers only (not the draining or
    the dead one), free slots without the held ones, the queued jobs in queue order (a queue
    entry whose job is gone is skipped), each queued tenant's quota, the usage counters."""
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, clock=clock) as h:
            s = h.scheduler
            await s.tenant_admin.tenants.create(Tenant(tenant_id="default", quota=Quota(
                max_devices=7, max_concurrent_jobs=3, max_queued_jobs=9)))
            await h.stub.RegisterWorker(register_request("dead-1", "trainer", 2))
            clock.advance(FAST.worker_ttl_ms // 2)
            await register_pool(h, trainer_devices=2, rollout_devices=2)
            await h.stub.RegisterWorker(register_request("drain-1", "trainer", 2))
            await h.stub.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="drain-1", drain=True))
            clock.advance(FAST.worker_ttl_ms // 2 + 1)  # dead-1 missed its TTL
            for worker_id in ("trainer-1", "rollout-1", "coord-1"):  # the live ones heartbeat on
                await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id=worker_id))
            running = await submit(h, "running")
            await s.allocator.tick(housekeeping=False)
            queued = [await submit(h, f"queued-{i}") for i in range(2)]
            await s.allocator.store.client.zadd(s.allocator.store.keys.job_queue(), {"job-gone": 0})
            await s.allocator.leases.acquire(job_id="gone", worker_id="rollout-1", role=Role.ROLLOUT,
                                             slots=["cpu:1"], device_ids=["cpu:1"], ttl_ms=5)
            clock.advance(5)  # that lease expired: its slot is free although its entry stays

            view = await s.allocator.reader.read(owner=s.allocator.owner, lock_ttl_ms=s.allocator.lock_ttl_ms,
                                                 scan_limit=10)

            workers = await s.pool.registry.all()
            alive = [w for w in workers if w.state is WorkerState.ALIVE]
            assert {w.worker_id for w in workers} == {"dead-1", "drain-1", "trainer-1", "rollout-1", "coord-1"}
            assert view.alive == alive and [w.worker_id for w in alive] == ["coord-1", "rollout-1", "trainer-1"]
            busy = {w.worker_id: await s.allocator.leases.busy_slots(w.worker_id) for w in alive}
            assert busy["trainer-1"] == {"cpu:0"} and busy["rollout-1"] == {"cpu:0"}
            assert view.free == {"trainer-1": ["cpu:1"], "rollout-1": ["cpu:1"],
                                 "coord-1": [f"slot:{i}" for i in range(1, FAST.coordinator_capacity)]}
            stored = await s.allocator.store.get_many([job.job_id for job in queued])
            assert [(j.job_id, j.tenant_id, j.state, j.resources, j.create_time_ms) for j in view.queued] == [
                (j.job_id, j.tenant_id, j.state, j.resources, j.create_time_ms)
                for j in (stored[job.job_id] for job in queued)]
            assert running.job_id not in {j.job_id for j in view.queued}
            assert view.quotas == {"default": Quota(max_devices=7, max_concurrent_jobs=3, max_queued_jobs=9)}
            usage = (await s.tenant_admin.tenants.get("default")).usage
            assert view.usage == {"default": usage}
            assert (usage.running_jobs, usage.queued_jobs) == (1, 2)

            other = await s.allocator.reader.read(owner="another-replica", lock_ttl_ms=1000, scan_limit=10)
            assert not other.holds_lock and other.queued == [] and other.alive == []

    asyncio.run(scenario())


def test_an_empty_queue_reads_only_the_lock(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            allocator = h.scheduler.allocator
            view = await allocator.reader.read(owner=allocator.owner, lock_ttl_ms=1000, scan_limit=10)
            assert view.holds_lock and view.queued == [] and view.alive == []

    asyncio.run(scenario())


def test_queued_job_decodes_what_the_script_returns() -> None:
    job = queued_job([b"job-1", b"acme", b"QUEUED", b'[{"role": "TRAINER", "device_count": 2, '
                      b'"device_kind": "CPU", "min_memory_bytes": 0}]', b"2", b"17", None, b"SESSION"])
    assert (job.job_id, job.tenant_id, job.device_count, job.create_time_ms, job.status_message, job.type) == (
        "job-1", "acme", 2, 17, "", JobType.SESSION)
    assert [(r.role, r.device_count) for r in job.resources] == [(Role.TRAINER, 2)]
    assert queued_job([None] * 8) is None  # deleted between the queue read and the hash read


def sft_spec() -> job_pb2.JobSpec:
    """A job asking for one trainer device (and, as every job, a coordinator slot)."""
    spec = rl_spec()
    spec.type = job_pb2.JOB_TYPE_SFT
    spec.environment.Clear()
    spec.dataset.path = "/data/chat.jsonl"
    spec.resources.add(role=resources_pb2.ROLE_TRAINER, device_count=1)
    return spec


def _start(allocator: Allocator, job: job_pb2.Job, index: int, slots: tuple[str, ...]) -> Start:
    """A Start of `job` on trainer-1 `slots` plus coordinator slot `index` (what a plan gives)."""
    queued = queued_job([job.job_id.encode(), b"default", b"QUEUED", b"[]", b"1", b"0", None, b"SFT"])
    drafts = [LeaseDraft(worker_id="trainer-1", role=Role.TRAINER, slots=slots, device_ids=slots),
              LeaseDraft(worker_id="coord-1", role=Role.COORDINATOR, slots=(f"slot:{index}",))]
    return Start(job=queued, drafts=drafts, addresses=["127.0.0.1:1", "127.0.0.1:2"], where="test",
                 job_token=allocator.tokens.draft(job.job_id))


def test_batched_starts_stay_all_or_nothing_each_and_never_share_a_slot(redis_url: str) -> None:
    """Three STARTs in one pipeline: the first takes cpu:0, the second asks for cpu:0 too and
    changes nothing at all (no lease, no event, still QUEUED), the third (cpu:1) starts. Then a
    pass reads the truth and starts the second on the slot left."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await h.stub.RegisterWorker(register_request("trainer-1", "trainer", 3))
            await h.stub.RegisterWorker(register_request("coord-1", "coordinator", 0))
            allocator = h.scheduler.allocator
            jobs = [(await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=f"r{i}", spec=sft_spec()))).job
                    for i in range(3)]
            starts = [_start(allocator, jobs[0], 0, ("cpu:0",)), _start(allocator, jobs[1], 1, ("cpu:0",)),
                      _start(allocator, jobs[2], 2, ("cpu:1",))]
            results = await allocator.store.start_many(starts, ttl_ms=FAST.worker_ttl_ms)
            assert [r.status for r in results] == ["ok", "busy", "ok"]
            assert results[1].detail == "trainer-1:cpu:0"
            first, refused, third = [await allocator.store.get(job.job_id) for job in jobs]
            assert (first.state, third.state, refused.state) == ("RUNNING", "RUNNING", "QUEUED")
            assert refused.last_event_sequence == 1 and refused.assignments == () and refused.attempt == 0
            assert await allocator.leases.of_job(jobs[1].job_id) == []
            holders = Counter(lease.slots for lease in await allocator.leases.of_worker("trainer-1"))
            assert holders == {("cpu:0",): 1, ("cpu:1",): 1}
            tokens = [a.lease.fencing_token for job in (first, third) for a in job.assignments]
            assert len(set(tokens)) == len(tokens) == 4

            await allocator.tick(housekeeping=False)
            again = await allocator.store.get(jobs[1].job_id)
            assert again.state == "RUNNING" and [a.device_ids for a in again.assignments if a.role is Role.TRAINER] == [
                ("cpu:2",)]

    asyncio.run(scenario())


def test_a_stale_view_makes_the_allocator_pass_again_at_once(redis_url: str) -> None:
    """A START refused because the world changed since the read (here a slot taken meanwhile)
    sets the wake-up, so the next pass comes without waiting for the interval."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            allocator = h.scheduler.allocator
            await submit(h, "a")
            view = await allocator.reader.read(owner=allocator.owner, lock_ttl_ms=allocator.lock_ttl_ms,
                                               scan_limit=10)
            await allocator.leases.acquire(job_id="other", worker_id="rollout-1", role=Role.ROLLOUT,
                                           slots=["cpu:0"], device_ids=["cpu:0"], ttl_ms=FAST.worker_ttl_ms)
            allocator.wake.clear()
            await allocator.allocate(view)
            assert allocator.wake.is_set()

    asyncio.run(scenario())


def test_starts_survive_redis_losing_its_scripts(redis_url: str) -> None:
    """SCRIPT FLUSH (a Redis restart loses scripts): the pipelined STARTs get NOSCRIPT, nothing
    ran, the script is loaded again and each job starts exactly once."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h, trainer_devices=2, rollout_devices=2)
            jobs = [await submit(h, f"job-{i}") for i in range(2)]
            allocator = h.scheduler.allocator
            view = await allocator.reader.read(owner=allocator.owner, lock_ttl_ms=allocator.lock_ttl_ms,
                                               scan_limit=10)
            await allocator.store.client.script_flush()
            await allocator.allocate(view)
            for job in jobs:
                stored = await allocator.store.get(job.job_id)
                assert stored.state == "RUNNING" and stored.attempt == 1 and stored.last_event_sequence == 3
            await allocator.store.client.script_flush()
            assert (await allocator.reader.read(owner=allocator.owner, lock_ttl_ms=1000, scan_limit=10)).holds_lock

    asyncio.run(scenario())


def test_submit_answers_the_job_as_get_job_reads_it(redis_url: str) -> None:
    """SubmitJob answers from what it stored (no second read): the same job GetJob returns."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            for i in range(3):
                submitted = await submit(h, f"same-{i}")
                got = (await h.stub.GetJob(pb.GetJobRequest(job_id=submitted.job_id))).job
                assert submitted == got and submitted.queue_position == i + 1
            again = await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="same-0", spec=rl_spec()))
            assert not again.created and again.job.queue_position == 1

    asyncio.run(scenario())


def test_a_submission_wakes_its_own_replica_without_pub_sub(redis_url: str) -> None:
    """The allocator runs without a subscriber and passes every 10 s: the job still starts at
    once, woken by its own SubmitJob."""
    async def scenario() -> None:
        slow = dataclasses.replace(FAST, allocator_interval_ms=10_000)
        async with scheduler_server(redis_url, config=slow) as h:
            await register_pool(h)
            loop = asyncio.create_task(h.scheduler.allocator.run_forever())
            try:
                await asyncio.sleep(0.3)  # past the first pass
                job = await submit(h, "wake")
                assert await eventually(lambda: _is_running(h, job.job_id), timeout=3.0)
            finally:
                loop.cancel()
                await asyncio.gather(loop, return_exceptions=True)

    asyncio.run(scenario())


def test_another_replicas_submission_still_wakes_the_allocator_by_pub_sub(redis_url: str) -> None:
    """Replica A allocates (interval 10 s); the job is submitted to replica B, whose own
    allocator does not run: A's subscriber wakes A."""
    async def scenario() -> None:
        slow = dataclasses.replace(FAST, allocator_interval_ms=10_000)
        async with scheduler_server(redis_url, config=slow, run_allocator=True) as a, \
                scheduler_server(redis_url, config=slow) as b:
            await register_pool(a)
            await asyncio.sleep(0.5)  # A took the lock and subscribed
            job = await submit(b, "from-b")
            assert await eventually(lambda: _is_running(a, job.job_id), timeout=3.0)

    asyncio.run(scenario())


def test_the_wake_up_listener_ignores_only_its_own_replicas_messages(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            allocator = h.scheduler.allocator
            subscriber = connect(redis_url, socket_timeout=None)
            listener = asyncio.create_task(allocator._listen(subscriber))
            channel = allocator.store.keys.allocator_wake()
            try:
                async def woken_by(message: str) -> bool:
                    await allocator.store.client.publish(channel, message)
                    return allocator.wake.is_set()

                assert await eventually(lambda: woken_by("another-replica"), timeout=3.0, interval=0.1)
                await asyncio.sleep(0.5)  # every message sent while polling has arrived
                allocator.wake.clear()
                await allocator.store.client.publish(channel, allocator.store.origin)
                await asyncio.sleep(0.5)
                assert not allocator.wake.is_set()
                assert await eventually(lambda: woken_by("freed"), timeout=3.0, interval=0.1)
            finally:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)
                await subscriber.aclose()

    asyncio.run(scenario())


async def _is_running(h: Harness, job_id: str) -> bool:
    return await state(h, job_id) == S.STATE_RUNNING


def test_a_worker_unheard_for_half_its_ttl_gets_no_new_lease_until_it_heartbeats_again(redis_url: str) -> None:
    """Several missed heartbeats (a host cut off): placing a job there would only wait for the
    worker's TTL and cost the job an attempt, so the worker keeps its registration and leases
    but offers no free slot until it is heard again."""
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, clock=clock) as h:
            s = h.scheduler
            await register_pool(h)
            read = lambda: s.allocator.reader.read(owner=s.allocator.owner, lock_ttl_ms=s.allocator.lock_ttl_ms,  # noqa: E731
                                                   scan_limit=10, workers_wanted=True)
            clock.advance(FAST.worker_ttl_ms // 2)
            assert (await read()).free["trainer-1"] == ["cpu:0"]  # half the TTL: still placeable
            clock.advance(1)
            view = await read()
            assert "trainer-1" in {w.worker_id for w in view.alive} and view.free["trainer-1"] == []
            await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id="trainer-1"))
            assert (await read()).free["trainer-1"] == ["cpu:0"]

    asyncio.run(scenario())
