"""Workers, heartbeats, the allocator, cancellation, FinishJob, ReportJobEvents and worker death.

The scheduler runs on a ManualClock and the allocator is ticked by hand, so every step is
deterministic; the gRPC calls and Redis are real.
"""

from __future__ import annotations

import asyncio

import grpc

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2, worker_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_scheduler.model import JobState, Role
from tests.scheduler._harness import (
    FAST,
    ManualClock,
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
TRAINER, ROLLOUT, COORDINATOR = (resources_pb2.ROLE_TRAINER, resources_pb2.ROLE_ROLLOUT,
                                 resources_pb2.ROLE_COORDINATOR)


async def heartbeat(h, worker_id: str) -> pb.HeartbeatResponse:  # noqa: ANN001
    return await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id=worker_id))


async def get(h, job_id: str) -> job_pb2.Job:  # noqa: ANN001
    return (await h.stub.GetJob(pb.GetJobRequest(job_id=job_id))).job


def test_rl_job_is_bound_to_trainer_rollout_and_coordinator(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            registered = await h.stub.RegisterWorker(register_request("trainer-1", "trainer", 2))
            assert registered.worker.state == worker_pb2.Worker.STATE_ALIVE
            assert registered.heartbeat_interval.ToMilliseconds() == FAST.heartbeat_interval_ms
            await h.stub.RegisterWorker(register_request("rollout-1", "rollout", 1, "10.0.0.2:7000"))
            await h.stub.RegisterWorker(register_request("coord-1", "coordinator", 0))
            job = await running_job(h)
            assert job.state == S.STATE_RUNNING and job.attempt == 1 and job.start_time.seconds > 0
            by_role = {a.role: a for a in job.assignments}
            assert set(by_role) == {TRAINER, ROLLOUT, COORDINATOR}
            assert by_role[TRAINER].worker_id == "trainer-1" and list(by_role[TRAINER].device_ids) == ["cpu:0"]
            assert (by_role[ROLLOUT].address, list(by_role[ROLLOUT].device_ids)) == ("10.0.0.2:7000", ["cpu:0"])
            assert list(by_role[COORDINATOR].device_ids) == []
            tokens = [a.lease.fencing_token for a in job.assignments]
            assert len(set(tokens)) == 3 and all(a.lease.job_id == job.job_id for a in job.assignments)
            for worker_id, role in (("trainer-1", TRAINER), ("rollout-1", ROLLOUT), ("coord-1", COORDINATOR)):
                response = await heartbeat(h, worker_id)
                assert [a.role for a in response.assignments] == [role]
                assert response.assignments[0] == by_role[role] and list(response.stop_job_ids) == []

    asyncio.run(scenario())


def test_a_waiting_job_says_what_it_waits_for(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await h.stub.RegisterWorker(register_request("trainer-1", "trainer"))
            job = await running_job(h)
            assert job.state == S.STATE_QUEUED and job.queue_position == 1
            assert "rollout" in job.status_message and "no alive rollout worker" in job.status_message
            await h.stub.RegisterWorker(register_request("rollout-1", "rollout"))
            await h.scheduler.allocator.tick()
            assert "coordinator" in (await get(h, job.job_id)).status_message
            await h.stub.RegisterWorker(register_request("coord-1", "coordinator", 0))
            await h.scheduler.allocator.tick()
            started = await get(h, job.job_id)
            assert started.state == S.STATE_RUNNING and started.status_message == ""

    asyncio.run(scenario())


def test_finish_releases_devices_so_the_next_job_runs_and_priority_wins(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            first = await running_job(h, "first")
            low = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="low", spec=rl_spec(priority=10)))).job
            high = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="high", spec=rl_spec(priority=90)))).job
            await h.scheduler.allocator.tick()
            assert (await get(h, high.job_id)).queue_position == 1
            assert (await get(h, low.job_id)).queue_position == 2
            assert "at most 0 free" in (await get(h, low.job_id)).status_message
            lease = lease_of(first)
            done = (await h.stub.FinishJob(pb.FinishJobRequest(lease=lease, final_state=S.STATE_SUCCEEDED))).job
            assert done.state == S.STATE_SUCCEEDED and done.end_time.seconds > 0
            await h.scheduler.allocator.tick()
            assert (await get(h, high.job_id)).state == S.STATE_RUNNING
            assert (await get(h, low.job_id)).state == S.STATE_QUEUED
            trainer = next(a for a in (await get(h, high.job_id)).assignments if a.role == TRAINER)
            assert list(trainer.device_ids) == ["cpu:0"] and trainer.lease.fencing_token > lease.fencing_token
            error = await rpc_error(h.stub.ReportJobEvents(pb.ReportJobEventsRequest(
                lease=lease, events=[job_pb2.JobEvent(log=job_pb2.LogLine(message="late"))])))
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert reason_of(error) == "ERROR_REASON_STALE_FENCING_TOKEN"
            again = (await h.stub.FinishJob(pb.FinishJobRequest(lease=lease, final_state=S.STATE_SUCCEEDED))).job
            assert again.job_id == first.job_id and again.state == S.STATE_SUCCEEDED
            error = await rpc_error(h.stub.FinishJob(pb.FinishJobRequest(lease=lease, final_state=S.STATE_FAILED)))
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION

    asyncio.run(scenario())


def test_report_events_checks_the_lease_and_is_idempotent(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            job = await running_job(h)
            lease = lease_of(job, TRAINER)
            request = pb.ReportJobEventsRequest(lease=lease, request_id="rep-1", events=[
                job_pb2.JobEvent(metrics=job_pb2.MetricsReported(step=1, values={"loss": 2.5})),
                job_pb2.JobEvent(log=job_pb2.LogLine(level=job_pb2.LogLine.LEVEL_INFO, message="hi"))])
            first = await h.stub.ReportJobEvents(request)
            again = await h.stub.ReportJobEvents(request)
            assert first.last_sequence == again.last_sequence == job.last_event_sequence + 2
            assert (await get(h, job.job_id)).last_event_sequence == first.last_sequence
            wrong = resources_pb2.LeaseContext(job_id=job.job_id, lease_id=lease.lease_id,
                                               fencing_token=lease.fencing_token + 100)
            error = await rpc_error(h.stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=wrong)))
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
            bad = pb.ReportJobEventsRequest(lease=lease, events=[job_pb2.JobEvent(
                state_changed=job_pb2.StateChanged(to_state=S.STATE_SUCCEEDED))])
            error = await rpc_error(h.stub.ReportJobEvents(bad))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.details().startswith("events[0].state_changed")
            error = await rpc_error(h.stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=lease, events=[
                job_pb2.JobEvent()])))
            assert error.details().startswith("events[0]:")
            error = await rpc_error(h.stub.FinishJob(pb.FinishJobRequest(lease=lease,
                                                                         final_state=S.STATE_CANCELLED)))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "final_state" in error.details()

    asyncio.run(scenario())


def test_cancel_running_job_tells_every_worker_then_cancels(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            job = await running_job(h)
            requested = (await h.stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id, reason="enough"))).job
            assert requested.state == S.STATE_RUNNING and requested.cancel_requested
            assert (await h.stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id))).job.cancel_requested
            for worker_id in ("trainer-1", "rollout-1"):
                response = await heartbeat(h, worker_id)
                assert list(response.stop_job_ids) == [job.job_id] and not response.assignments
            assert (await get(h, job.job_id)).state == S.STATE_RUNNING
            await heartbeat(h, "coord-1")
            cancelled = await get(h, job.job_id)
            assert cancelled.state == S.STATE_CANCELLED
            assert await h.scheduler.jobs.leases.of_job(job.job_id) == []
            again = (await h.stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id))).job
            assert again.state == S.STATE_CANCELLED  # cancelling twice is a no-op

    asyncio.run(scenario())


def test_cancel_a_finished_job_is_failed_precondition(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            job = await running_job(h)
            await h.stub.FinishJob(pb.FinishJobRequest(lease=lease_of(job), final_state=S.STATE_FAILED,
                                                       message="diverged"))
            error = await rpc_error(h.stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id)))
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert reason_of(error) == "ERROR_REASON_JOB_NOT_CANCELLABLE"
            assert (await get(h, job.job_id)).status_message == "diverged"

    asyncio.run(scenario())


def test_starting_is_all_or_nothing_when_the_world_changed_since_the_pass_read_it(redis_url: str) -> None:
    """Between the pass's read and START, the job is cancelled or a slot is taken: START
    changes nothing (no lease, no event), and the next pass sees the truth."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            allocator = h.scheduler.allocator
            cancelled = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="a", spec=rl_spec()))).job
            view = await allocator.reader.read(owner=allocator.owner, lock_ttl_ms=allocator.lock_ttl_ms,
                                               scan_limit=10)
            await h.stub.CancelJob(pb.CancelJobRequest(job_id=cancelled.job_id))
            await allocator.allocate(view)
            assert (await get(h, cancelled.job_id)).state == S.STATE_CANCELLED
            assert await h.scheduler.jobs.leases.of_job(cancelled.job_id) == []

            job = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="b", spec=rl_spec()))).job
            view = await allocator.reader.read(owner=allocator.owner, lock_ttl_ms=allocator.lock_ttl_ms,
                                               scan_limit=10)
            squatter = await h.scheduler.jobs.leases.acquire(
                job_id="other", worker_id="rollout-1", role=Role.ROLLOUT, slots=["cpu:0"],
                device_ids=["cpu:0"], ttl_ms=FAST.worker_ttl_ms)
            await allocator.allocate(view)
            refused = await get(h, job.job_id)
            assert refused.state == S.STATE_QUEUED and refused.assignments == []
            assert await h.scheduler.jobs.leases.of_job(job.job_id) == []
            assert refused.last_event_sequence == 1  # only "submitted": no ALLOCATING was recorded
            await h.scheduler.jobs.leases.release(squatter.lease_id)
            await allocator.tick()
            started = await get(h, job.job_id)
            assert started.state == S.STATE_RUNNING and len(started.assignments) == 3
            events = await h.scheduler.jobs.events.after(job.job_id, 0)
            assert [str(e.payload.to_state) for e in events] == ["QUEUED", "ALLOCATING", "RUNNING"]

    asyncio.run(scenario())


async def lose_trainer(h, clock) -> None:  # noqa: ANN001
    """The trainer stops heartbeating; the rollout and coordinator keep on, past the TTL."""
    for _ in range(3):
        clock.advance(FAST.worker_ttl_ms // 2)
        await heartbeat(h, "rollout-1")
        await heartbeat(h, "coord-1")
        await h.scheduler.allocator.tick()


def test_a_requeued_multi_agent_job_resumes_every_agent_from_the_common_checkpoint(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, clock=clock) as h:
            await register_pool(h)
            job = await running_job(h, spec=rl_spec())
            common = job_pb2.CheckpointSaved(checkpoint_id="ck-a-2", step=2,
                                             agent_checkpoint_ids={"a": "ck-a-2", "b": "ck-b-2"},
                                             driver_state={"elo/a": 1012.5, "elo/b": 987.5})
            later = job_pb2.CheckpointSaved(checkpoint_id="ck-a-4", step=4,
                                            agent_checkpoint_ids={"a": "ck-a-4", "b": "ck-b-4"},
                                            driver_state={"elo/a": 1020.0, "elo/b": 980.0})
            for checkpoint in (common, later):
                await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(
                    lease=lease_of(job), events=[job_pb2.JobEvent(checkpoint=checkpoint)]))
            await lose_trainer(h, clock)
            requeued = await get(h, job.job_id)
            assert requeued.resume_from == later
            events = await h.scheduler.jobs.events.after(job.job_id, 0)
            saved = [e.payload for e in events if type(e.payload).__name__ == "CheckpointSaved"]
            assert saved[0].agent_checkpoint_ids == {"a": "ck-a-2", "b": "ck-b-2"}

    asyncio.run(scenario())


def test_worker_death_requeues_the_job_from_its_last_checkpoint_until_retries_run_out(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, clock=clock) as h:
            await register_pool(h)
            spec = rl_spec()
            spec.training.max_retries = 1
            job = await running_job(h, spec=spec)
            assert job.retries_left == 1 and not job.HasField("resume_from")
            await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=lease_of(job), events=[
                job_pb2.JobEvent(checkpoint=job_pb2.CheckpointSaved(checkpoint_id="ck-step-4", step=4))]))
            await lose_trainer(h, clock)
            requeued = await get(h, job.job_id)
            assert requeued.state == S.STATE_QUEUED and requeued.retries_left == 0
            assert requeued.assignments == [] and requeued.attempt == 1
            assert requeued.resume_from.checkpoint_id == "ck-step-4" and requeued.resume_from.step == 4
            assert "no alive trainer worker" in requeued.status_message  # why it waits now
            events = await h.scheduler.jobs.events.after(job.job_id, 0)
            why = events[-1].payload.reason  # why it was re-queued
            assert why.startswith("lost the trainer lease on worker trainer-1: no heartbeat")
            assert why.endswith("re-queued to resume from checkpoint ck-step-4 (step 4), 0 retries left")
            assert await h.scheduler.jobs.leases.of_job(job.job_id) == []  # rollout + coordinator freed too
            assert (await heartbeat(h, "rollout-1")).assignments == []  # so their workers stop the job

            error = await rpc_error(heartbeat(h, "trainer-1"))  # declared dead: must register again
            assert error.code() == grpc.StatusCode.NOT_FOUND
            await h.stub.RegisterWorker(register_request("trainer-1", "trainer"))
            await h.scheduler.allocator.tick()
            second = await get(h, job.job_id)
            assert second.state == S.STATE_RUNNING and second.attempt == 2
            assert min(a.lease.fencing_token for a in second.assignments) > max(
                a.lease.fencing_token for a in job.assignments)  # the old attempt is fenced off
            stale = await rpc_error(h.stub.ReportJobEvents(pb.ReportJobEventsRequest(
                lease=lease_of(job), events=[job_pb2.JobEvent(log=job_pb2.LogLine(message="zombie"))])))
            assert stale.code() == grpc.StatusCode.FAILED_PRECONDITION

            await lose_trainer(h, clock)
            failed = await get(h, job.job_id)
            assert failed.state == S.STATE_FAILED
            assert "no retries left after 2 attempts" in failed.status_message
            events = await h.scheduler.jobs.events.after(job.job_id, 0)
            lost = [e.payload for e in events if type(e.payload).__name__ == "WorkerLost"]
            assert [(p.worker_id, p.role) for p in lost] == [("trainer-1", "TRAINER")] * 2
            states = [str(e.payload.to_state) for e in events if type(e.payload).__name__ == "StateChanged"]
            assert states == ["QUEUED", "ALLOCATING", "RUNNING", "QUEUED", "ALLOCATING", "RUNNING", "FAILED"]
            workers = {w.worker_id: w.state for w in (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers}
            assert workers["trainer-1"] == worker_pb2.Worker.STATE_DEAD
            assert workers["rollout-1"] == worker_pb2.Worker.STATE_ALIVE

    asyncio.run(scenario())


def test_a_job_without_retries_fails_when_its_worker_dies(redis_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with scheduler_server(redis_url, clock=clock) as h:
            await register_pool(h)
            spec = rl_spec()
            spec.training.max_retries = 0
            job = await running_job(h, spec=spec)
            await lose_trainer(h, clock)
            failed = await get(h, job.job_id)
            assert failed.state == S.STATE_FAILED
            assert "no retries left after 1 attempt " in failed.status_message
            assert await h.scheduler.jobs.leases.of_worker("rollout-1") == []

    asyncio.run(scenario())


def test_reregistering_a_worker_ends_the_jobs_of_its_old_registration(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            job = await running_job(h)
            await h.stub.RegisterWorker(register_request("rollout-1", "rollout"))
            requeued = await get(h, job.job_id)
            assert requeued.state == S.STATE_QUEUED and "registered again" in requeued.status_message

    asyncio.run(scenario())


def test_draining_worker_gets_no_new_jobs_and_list_workers_pages(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            await h.stub.RegisterWorker(register_request("trainer-2", "trainer"))
            drained = await h.stub.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="trainer-1", drain=True))
            assert drained.worker.state == worker_pb2.Worker.STATE_DRAINING
            job = await running_job(h)
            assert next(a for a in job.assignments if a.role == TRAINER).worker_id == "trainer-2"
            first = await h.stub.ListWorkers(pb.ListWorkersRequest(page_size=2))
            second = await h.stub.ListWorkers(pb.ListWorkersRequest(page_size=2, page_token=first.next_page_token))
            assert [w.worker_id for w in [*first.workers, *second.workers]] == [
                "coord-1", "rollout-1", "trainer-1", "trainer-2"]
            assert second.next_page_token == ""
            trainers = await h.stub.ListWorkers(pb.ListWorkersRequest(role=TRAINER))
            assert [w.worker_id for w in trainers.workers] == ["trainer-1", "trainer-2"]
            assert len(trainers.workers[1].leases) == 1
            gone = await h.stub.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="trainer-2"))
            assert gone.worker.state == worker_pb2.Worker.STATE_DEAD
            assert (await get(h, job.job_id)).state == S.STATE_QUEUED  # re-queued: a retry is left
            error = await rpc_error(heartbeat(h, "trainer-2"))
            assert error.code() == grpc.StatusCode.NOT_FOUND

    asyncio.run(scenario())


def test_register_rejects_bad_workers(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            twice = register_request("w", "trainer", 0)
            twice.devices.add(device_id="cpu:0")
            twice.devices.add(device_id="cpu:0")
            cases = [(pb.RegisterWorkerRequest(role=TRAINER, address="h:1"), "worker_id"),
                     (pb.RegisterWorkerRequest(worker_id="w", address="h:1"), "role"),
                     (pb.RegisterWorkerRequest(worker_id="w", role=TRAINER), "address"),
                     (twice, "devices[1].device_id")]
            for request, field in cases:
                error = await rpc_error(h.stub.RegisterWorker(request))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert error.details().startswith(field), error.details()

    asyncio.run(scenario())


def test_leaving_running_releases_every_lease_in_the_same_step_and_heartbeats_drop_orphans(redis_url: str) -> None:
    """A transition out of RUNNING frees the job's leases atomically (no crash window); a lease
    that belongs to no current assignment anyway (an earlier attempt's) is released by its
    worker's next heartbeat, which does not report it."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, clock=ManualClock()) as h:
            await register_pool(h)
            job = await running_job(h)
            leases = h.scheduler.jobs.leases
            moved = await h.scheduler.jobs.store.transition(
                job.job_id, expected=JobState.RUNNING, to=JobState.QUEUED, reason="re-queued",
                fields={"assignments": "[]"})
            assert moved.ok and await leases.of_job(job.job_id) == []
            assert await leases.busy_slots("trainer-1") == set()
            orphan = await leases.acquire(job_id=job.job_id, worker_id="rollout-1", role=Role.ROLLOUT,
                                          slots=["cpu:0"], device_ids=["cpu:0"], ttl_ms=FAST.worker_ttl_ms)
            assert (await heartbeat(h, "rollout-1")).assignments == []
            assert await leases.get(orphan.lease_id) is None
            await h.scheduler.allocator.tick()
            again = await get(h, job.job_id)
            assert again.state == S.STATE_RUNNING and again.attempt == 2

    asyncio.run(scenario())
