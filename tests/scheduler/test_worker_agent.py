"""WorkerAgent against a live scheduler (real clock, allocator loop running, short intervals)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.workers.devices import Device, ResidentModel, discover_devices
from opentinker_runtime.core.embedded_redis import free_port
from opentinker_runtime.core.redis_store import Backoff
from opentinker_runtime.workers.agent import WorkerAgent
from tests.scheduler._harness import FAST, Harness, eventually, rl_spec, scheduler_server

S = job_pb2.Job


class Recorder:
    """Callbacks that record what the agent told the worker."""

    def __init__(self) -> None:
        self.assigned: list[job_pb2.Assignment] = []
        self.stopped: list[str] = []

    async def on_assignment(self, assignment: job_pb2.Assignment) -> None:
        self.assigned.append(assignment)

    async def on_stop(self, job_id: str) -> None:
        self.stopped.append(job_id)


def agent_for(address: str, role: str, recorder: Recorder, devices: list[Device]) -> WorkerAgent:
    return WorkerAgent(scheduler_address=address, role=role, worker_id=f"{role}-w",
                       address=f"127.0.0.1:{free_port()}", devices=devices,
                       on_assignment=recorder.on_assignment, on_stop=recorder.on_stop,
                       backoff=Backoff(initial_seconds=0.05, max_seconds=0.2))


@asynccontextmanager
async def pool(address: str) -> AsyncIterator[dict[str, Recorder]]:
    recorders = {role: Recorder() for role in ("trainer", "rollout", "coordinator")}
    agents = [agent_for(address, role, rec, discover_devices(cpu_slots=0 if role == "coordinator" else 1))
              for role, rec in recorders.items()]
    for agent in agents:
        await agent.start()
    try:
        for agent in agents:
            await agent.wait_registered(timeout=5)
        yield recorders
    finally:
        for agent in agents:
            await agent.stop()


async def submit(h: Harness, request_id: str, max_retries: int = 0) -> str:
    spec = rl_spec()
    spec.training.max_retries = max_retries
    return (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=request_id, spec=spec))).job.job_id


async def state(h: Harness, job_id: str) -> int:
    return (await h.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job.state


def test_agents_receive_assignments_and_stops_through_heartbeats(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, run_allocator=True) as h, pool(h.address) as recorders:
            first = await submit(h, "one")
            await eventually(lambda: _all_assigned(recorders, 1))
            roles = {r.assigned[0].role for r in recorders.values()}
            assert roles == {resources_pb2.ROLE_TRAINER, resources_pb2.ROLE_ROLLOUT,
                             resources_pb2.ROLE_COORDINATOR}
            assert {r.assigned[0].lease.job_id for r in recorders.values()} == {first}
            second = await submit(h, "two")
            await asyncio.sleep(0.5)
            assert await state(h, second) == S.STATE_QUEUED  # the single trainer slot is taken
            lease = recorders["coordinator"].assigned[0].lease
            await h.stub.FinishJob(pb.FinishJobRequest(lease=lease, final_state=S.STATE_SUCCEEDED))
            await eventually(lambda: _all_assigned(recorders, 2))
            assert all(r.stopped[:1] == [first] for r in recorders.values())
            assert {r.assigned[1].lease.job_id for r in recorders.values()} == {second}
            await h.stub.CancelJob(pb.CancelJobRequest(job_id=second))
            await eventually(lambda: _all_stopped(recorders, [first, second]))
            assert await eventually(lambda: _is(h, second, S.STATE_CANCELLED))
            assert all(len(r.assigned) == 2 for r in recorders.values())  # once per lease

    asyncio.run(scenario())


async def _all_assigned(recorders: dict[str, Recorder], count: int) -> bool:
    return all(len(r.assigned) >= count for r in recorders.values())


async def _all_stopped(recorders: dict[str, Recorder], job_ids: list[str]) -> bool:
    return all(r.stopped == job_ids for r in recorders.values())


async def _is(h: Harness, job_id: str, expected: int) -> bool:
    return await state(h, job_id) == expected


def test_agent_retries_until_the_scheduler_is_up(redis_url: str) -> None:
    async def scenario() -> None:
        port = free_port()
        recorder = Recorder()
        agent = agent_for(f"127.0.0.1:{port}", "trainer", recorder, discover_devices(cpu_slots=2))
        await agent.start()
        try:
            await asyncio.sleep(0.4)
            assert not agent.registered.is_set()
            async with scheduler_server(redis_url, port=port) as h:
                await agent.wait_registered(timeout=5)
                workers = (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers
                assert [(w.worker_id, [d.device_id for d in w.devices]) for w in workers] == [
                    ("trainer-w", ["cpu:0", "cpu:1"])]
        finally:
            await agent.stop(deregister=False)

    asyncio.run(scenario())


def test_agent_registers_again_when_the_scheduler_forgot_it(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, run_allocator=True) as h, pool(h.address) as recorders:
            job_id = await submit(h, "forget")
            await eventually(lambda: _all_assigned(recorders, 1))
            await h.stub.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="rollout-w"))
            assert await eventually(lambda: _is(h, job_id, S.STATE_FAILED))
            await eventually(lambda: _all_stopped(recorders, [job_id]))
            listed = await eventually(lambda: _listed(h, "rollout-w"))
            assert listed.role == resources_pb2.ROLE_ROLLOUT

    asyncio.run(scenario())


def test_a_lost_worker_requeues_the_job_and_every_worker_serves_the_next_attempt(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, run_allocator=True) as h, pool(h.address) as recorders:
            job_id = await submit(h, "retry", max_retries=1)
            await eventually(lambda: _all_assigned(recorders, 1))
            await h.stub.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="rollout-w"))
            await eventually(lambda: _all_assigned(recorders, 2))  # the agent registered again
            job = (await h.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job
            assert job.state == S.STATE_RUNNING and job.attempt == 2 and job.retries_left == 0
            for recorder in recorders.values():
                first, second = recorder.assigned[:2]
                assert first.lease.job_id == second.lease.job_id == job_id
                assert second.lease.fencing_token > first.lease.fencing_token
            assert recorders["rollout"].stopped == [job_id]  # it lost everything when forgotten
            for role in ("trainer", "coordinator"):
                # A worker whose heartbeat saw the re-queued job is told to stop; one whose next
                # heartbeat already carried the second attempt's lease goes straight on to it.
                assert recorders[role].stopped in ([], [job_id])

    asyncio.run(scenario())


async def _listed(h: Harness, worker_id: str):  # noqa: ANN202
    workers = (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers
    return next((w for w in workers if w.worker_id == worker_id), None)


def test_discover_devices_without_a_gpu_gives_cpu_slots() -> None:
    devices = discover_devices(cpu_slots=3)
    if devices and devices[0].kind == "cuda":  # a GPU machine: every device is a GPU
        assert all(d.device_id.startswith("cuda:") and d.memory_bytes > 0 for d in devices)
        return
    assert [(d.device_id, d.kind) for d in devices] == [("cpu:0", "cpu"), ("cpu:1", "cpu"), ("cpu:2", "cpu")]
    assert discover_devices(cpu_slots=0) == []


def test_a_submission_wakes_the_allocator_long_before_its_interval(redis_url: str) -> None:
    """The allocator passes every 10 s here; a SubmitJob wakes it, so the job starts at once (the
    job would wait ~10 s otherwise). Another replica's submissions wake it by pub/sub: see
    test_allocation_pass.py."""
    async def scenario() -> None:
        slow = dataclasses.replace(FAST, allocator_interval_ms=10_000)
        async with scheduler_server(redis_url, config=slow, run_allocator=True) as h, pool(h.address):
            await asyncio.sleep(0.5)  # past the first pass, which the loop makes at once
            job_id = await submit(h, "wake")
            assert await eventually(lambda: _is(h, job_id, S.STATE_RUNNING), timeout=3.0)

    asyncio.run(scenario())


def test_a_newer_lease_of_the_same_job_replaces_the_old_one_without_a_stop() -> None:
    """A re-queued job that lands on the same worker again: the new attempt starts and is not
    stopped because the old attempt's lease disappeared in the same heartbeat."""
    async def scenario() -> None:
        recorder = Recorder()
        agent = agent_for("127.0.0.1:1", "coordinator", recorder, [])

        def lease(lease_id: str, token: int) -> job_pb2.Assignment:
            return job_pb2.Assignment(lease=resources_pb2.LeaseContext(job_id="job-x", lease_id=lease_id,
                                                                       fencing_token=token))

        agent._apply([lease("old", 1)], [])
        agent._apply([lease("new", 2)], [])
        await asyncio.sleep(0.05)
        assert [a.lease.fencing_token for a in recorder.assigned] == [1, 2]
        assert recorder.stopped == []
        agent._apply([], [])
        await asyncio.sleep(0.05)
        assert recorder.stopped == ["job-x"]

    asyncio.run(scenario())


def test_a_worker_cut_off_from_the_scheduler_stops_its_jobs_once_their_leases_must_have_expired(redis_url: str) -> None:
    """A network partition as a worker sees it: heartbeats fail. Past the worker TTL (3 s here)
    the Scheduler has expired its leases and re-queued the job, so the worker stops serving it
    (never training on beside the next attempt); not a moment before the TTL."""
    async def scenario() -> None:
        recorders = {role: Recorder() for role in ("trainer", "rollout", "coordinator")}
        agents: list[WorkerAgent] = []
        loop = asyncio.get_running_loop()
        try:
            async with scheduler_server(redis_url, run_allocator=True) as h:
                agents = [agent_for(h.address, role, rec, discover_devices(cpu_slots=0 if role == "coordinator" else 1))
                          for role, rec in recorders.items()]
                for agent in agents:
                    await agent.start()
                    await agent.wait_registered(timeout=5)
                job_id = await submit(h, "partitioned", max_retries=2)
                await eventually(lambda: _all_assigned(recorders, 1))
                assert all(agent.lease_ttl == FAST.worker_ttl_ms / 1000 for agent in agents)
                cut_at = loop.time()
            # the Scheduler is gone: no heartbeat gets through from here on
            await asyncio.sleep(FAST.worker_ttl_ms / 1000 - 1.0)
            assert all(r.stopped == [] for r in recorders.values())  # the leases may still hold
            await eventually(lambda: _all_stopped(recorders, [job_id]), timeout=5)
            assert loop.time() - cut_at >= FAST.worker_ttl_ms / 1000
        finally:
            for agent in agents:
                await agent.stop(deregister=False)

    asyncio.run(scenario())


def test_a_changed_resident_report_reaches_the_scheduler_long_before_the_next_heartbeat(redis_url: str) -> None:
    """Heartbeats every 10 s here; a base loaded (or freed) between them is reported within a
    fraction of a second, so placement by base and the workers view never lag a heartbeat. An
    unchanged report waits for the interval."""
    async def scenario() -> None:
        slow = dataclasses.replace(FAST, heartbeat_interval_ms=10_000, worker_ttl_ms=30_000)
        resident: list[ResidentModel] = []
        async with scheduler_server(redis_url, config=slow) as h:
            recorder = Recorder()
            agent = WorkerAgent(scheduler_address=h.address, role="trainer", worker_id="trainer-r",
                                address=f"127.0.0.1:{free_port()}", devices=discover_devices(cpu_slots=1),
                                on_assignment=recorder.on_assignment, on_stop=recorder.on_stop,
                                resident_models=lambda: list(resident))
            await agent.start()
            try:
                await agent.wait_registered(timeout=5)

                async def reported() -> set[tuple[str, tuple[str, ...]]]:
                    workers = (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers
                    return {(m.model_key, tuple(m.job_ids)) for w in workers for m in w.resident_models}

                resident.append(ResidentModel(device_id="cpu:0", model_key="builtin:tiny-llama@1/default", job_ids=("job-a",)))
                assert await eventually(lambda: _has(reported, {("builtin:tiny-llama@1/default", ("job-a",))}),
                                        timeout=2.0)
                resident[0] = ResidentModel(device_id="cpu:0", model_key="builtin:tiny-llama@1/default", job_ids=("job-a", "job-b"))
                assert await eventually(lambda: _has(reported, {("builtin:tiny-llama@1/default", ("job-a", "job-b"))}),
                                        timeout=2.0)
                resident.clear()
                assert await eventually(lambda: _has(reported, set()), timeout=2.0)
            finally:
                await agent.stop()

    asyncio.run(scenario())


async def _has(reported: Callable[[], Awaitable[set[tuple[str, tuple[str, ...]]]]],
               expected: set[tuple[str, tuple[str, ...]]]) -> bool:
    return await reported() == expected
