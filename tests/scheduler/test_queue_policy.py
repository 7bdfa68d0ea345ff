"""The queue's policy: priorities, FIFO, aging, backfilling with a starvation guard, tenant quotas,
and GetJob saying why a queued job waits. ManualClock + hand-ticked allocator, real Redis and gRPC."""

from __future__ import annotations

import asyncio
import dataclasses

import grpc

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_scheduler.model import Quota, Tenant
from tests.scheduler._harness import FAST, ManualClock, lease_of, reason_of, rpc_error, scheduler_server
from tests.scheduler._queue import S, get, pool, running, sft_spec, submit


async def finish(h, job_id: str) -> None:  # noqa: ANN001
    job = await get(h, job_id)
    await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(job), final_state=S.STATE_SUCCEEDED))


def test_priority_first_then_fifo(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            low = await submit(h, "low", sft_spec(priority=10))
            high_1 = await submit(h, "high-1", sft_spec(priority=90))
            high_2 = await submit(h, "high-2", sft_spec(priority=90))
            assert [(await get(h, j)).queue_position for j in (high_1, high_2, low)] == [1, 2, 3]
            await pool(h, trainer_devices=1)
            order = []
            for _ in range(3):
                await h.scheduler.allocator.tick()
                (started,) = await running(h, [low, high_1, high_2])
                order.append(started)
                await finish(h, started)
            assert order == [high_1, high_2, low]

    asyncio.run(scenario())


def test_aging_lets_a_long_waiting_low_priority_job_overtake(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        config = dataclasses.replace(FAST, queue_aging_ms=1_000)  # 1 s of waiting = 1 priority point
        async with scheduler_server(redis_url, clock=clock, config=config) as h:
            old_low = await submit(h, "old-low", sft_spec(priority=40))
            clock.advance(20_000)
            new_mid = await submit(h, "new-mid", sft_spec(priority=50))  # 10 points up, 20 s later
            new_high = await submit(h, "new-high", sft_spec(priority=70))  # 30 points up, 20 s later
            positions = [(await get(h, j)).queue_position for j in (new_high, old_low, new_mid)]
            assert positions == [1, 2, 3]

    asyncio.run(scenario())


def test_backfilling_and_the_starvation_guard(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        config = dataclasses.replace(FAST, starvation_ms=10_000)
        async with scheduler_server(redis_url, clock=clock, config=config) as h:
            await pool(h, trainer_devices=2)
            first = await submit(h, "first", sft_spec())
            await h.scheduler.allocator.tick()
            big = await submit(h, "big", sft_spec(trainer_devices=2))
            small = await submit(h, "small", sft_spec())
            await h.scheduler.allocator.tick()
            assert await running(h, [first, big, small]) == {first, small}  # small backfilled
            waiting = await get(h, big)
            assert waiting.queue_position == 1
            assert waiting.status_message == ("waiting for 2 trainer slots (any device) across trainer workers: "
                                              "1 alive trainer worker, 1 free in all")  # as the pass saw it

            for _ in range(11):  # big waits past the starvation limit; the workers stay alive
                clock.advance(1_000)
                for worker in ("trainer-1", "coord-1"):
                    await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id=worker))
            await finish(h, small)
            later = await submit(h, "later", sft_spec())
            await h.scheduler.allocator.tick()
            assert await running(h, [big, later]) == set()  # one device free, but not for `later`
            blocked = await get(h, later)
            assert blocked.status_message == (f"waiting behind job {big}, which has waited 11 s: "
                                              "no backfilling past it until it starts")
            await finish(h, first)
            await h.scheduler.allocator.tick()
            assert await running(h, [big, later]) == {big}

    asyncio.run(scenario())


def test_tenant_quotas_limit_queued_running_and_devices(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            tenants = h.scheduler.tenant_admin.tenants
            await tenants.create(Tenant(tenant_id="default", quota=Quota(
                max_devices=3, max_concurrent_jobs=1, max_queued_jobs=2)))
            await pool(h, trainer_devices=4)
            one = await submit(h, "one", sft_spec())
            two = await submit(h, "two", sft_spec())
            error = await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(request_id="three", spec=sft_spec())))
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "2 queued jobs (its quota max_queued_jobs)" in error.details()
            assert reason_of(error) == "ERROR_REASON_QUOTA_EXCEEDED"
            huge = await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(request_id="huge", spec=sft_spec(trainer_devices=4))))
            assert huge.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "needs 4 devices but tenant default's quota max_devices is 3" in huge.details()

            await h.scheduler.allocator.tick()
            assert await running(h, [one, two]) == {one}  # free devices, but one job at a time
            waiting = await get(h, two)
            assert waiting.status_message == ("waiting for the tenant's quota: 1 jobs running, "
                                              "max_concurrent_jobs is 1")
            usage = (await tenants.get("default")).usage
            assert (usage.running_jobs, usage.devices, usage.queued_jobs) == (1, 1, 1)
            three = await submit(h, "three", sft_spec())  # a queued slot is free again

            await tenants.set_quota("default", Quota(max_devices=2, max_concurrent_jobs=5))
            big = await submit(h, "big", sft_spec(trainer_devices=2))
            await h.scheduler.allocator.tick()
            assert await running(h, [one, two, three, big]) == {one, two}  # 2 devices: the quota
            assert "needs 2 devices, 2 of max_devices 2 in use" in (await get(h, big)).status_message
            await finish(h, one)
            await finish(h, two)
            await h.scheduler.allocator.tick()
            assert await running(h, [three, big]) == {three}  # FIFO; then big would exceed 2 devices
            usage = (await tenants.get("default")).usage
            assert (usage.running_jobs, usage.devices, usage.queued_jobs) == (1, 1, 1)
            await finish(h, three)
            await h.scheduler.allocator.tick()
            assert await running(h, [big]) == {big}
            usage = (await tenants.get("default")).usage
            assert (usage.running_jobs, usage.devices, usage.queued_jobs) == (1, 2, 0)

    asyncio.run(scenario())
