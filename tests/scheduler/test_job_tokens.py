"""Per-job tokens on a real Scheduler (auth on), real Redis, real metadata: minted at START with
the attempt, handed to the attempt's workers and to admin keys only, stored hashed, refused once
the attempt is over, and required on the Coordinator's reports."""

from __future__ import annotations

import asyncio

import grpc

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.auth.job_tokens import (FENCING_FIELD, HASH_FIELD, JOB_TOKEN_PATTERN, NONCE_FIELD, JobTokenVerifier,
                                        hash_job_token)
from opentinker_runtime.core.redis_store import Keys, connect
from tests.scheduler._auth_server import ADMIN_KEY, scheduler_server
from tests.scheduler._harness import reason_of, register_pool, register_request, rl_spec, rpc_error, running_job
from tests.scheduler._tenants import new_tenant

WORKERS = ("trainer-1", "rollout-1", "coord-1")


async def events_until(stub: pb_grpc.SchedulerServiceStub, job_id: str, last: int) -> list[job_pb2.JobEvent]:
    """The job's events up to sequence `last` (the job still runs: the stream is cancelled then)."""
    events, call = [], stub.WatchJob(pb.WatchJobRequest(job_id=job_id))
    async for response in call:
        events.append(response.event)
        if response.event.sequence >= last:
            call.cancel()
            break
    return events


async def heartbeat_tokens(h) -> dict[str, set[str]]:  # noqa: ANN001
    """The job tokens each worker's Heartbeat hands out, by worker."""
    tokens = {}
    for worker in WORKERS:
        response = await h.stub.Heartbeat(pb.HeartbeatRequest(worker_id=worker))
        tokens[worker] = {a.job_token for a in response.assignments}
    return tokens


def test_an_attempt_gets_one_token_handed_to_its_workers_and_admins_and_stored_hashed(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)
            by_worker = await heartbeat_tokens(h)
            token = next(iter(by_worker["coord-1"]))
            assert JOB_TOKEN_PATTERN.match(token)
            assert all(tokens == {token} for tokens in by_worker.values())  # one token per attempt
            assert {a.job_token for a in job.assignments} == {token}  # GetJob, admin key
            listed = (await h.stub.ListJobs(pb.ListJobsRequest())).jobs
            assert [a.job_token for j in listed for a in j.assignments] == [""] * len(job.assignments)
            events = await events_until(h.stub, job.job_id, job.last_event_sequence)
            assert len(events) == job.last_event_sequence and all(token not in str(e) for e in events)
            async with connect(redis_url) as client:
                record = await client.hgetall(Keys().job(job.job_id))
                assert record[HASH_FIELD.encode()].decode() == hash_job_token(token)
                fencing = {str(a.lease.fencing_token) for a in job.assignments}
                assert set(record[FENCING_FIELD.encode()].decode().split(",")) == fencing
                assert record[NONCE_FIELD.encode()] and token.encode() not in b" ".join(record.values())

    asyncio.run(scenario())


def test_tenant_keys_never_see_a_job_token(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            channel = authenticated_channel(h.address, await new_tenant(h, "acme"))
            acme = pb_grpc.SchedulerServiceStub(channel)
            async with channel:
                submitted = (await acme.SubmitJob(pb.SubmitJobRequest(request_id="mine", spec=rl_spec()))).job
                await h.scheduler.allocator.tick()
                own = (await acme.GetJob(pb.GetJobRequest(job_id=submitted.job_id))).job
                assert own.assignments and all(a.job_token == "" for a in own.assignments)
                listed = (await acme.ListJobs(pb.ListJobsRequest())).jobs
                assert listed and all(a.job_token == "" for j in listed for a in j.assignments)
                admin_view = (await h.stub.GetJob(pb.GetJobRequest(job_id=submitted.job_id))).job
                assert all(JOB_TOKEN_PATTERN.match(a.job_token) for a in admin_view.assignments)

    asyncio.run(scenario())


def test_the_verifier_accepts_only_the_current_attempt_and_its_fencing_tokens(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h, \
                connect(redis_url) as client:
            await register_pool(h)
            job = await running_job(h)
            first = job.assignments[0].job_token
            fencing = job.assignments[0].lease.fencing_token
            verify = JobTokenVerifier(client, ttl_seconds=0).verify
            assert (await verify(job.job_id, first, fencing)).allowed
            assert (await verify(job.job_id, first)).allowed  # a session's call: no lease, same job
            assert "not the current attempt" in (await verify(job.job_id, "otj_" + "A" * 43, fencing)).problem
            assert "carries no job token" in (await verify(job.job_id, "", fencing)).problem
            assert "fencing token" in (await verify(job.job_id, first, fencing + 1000)).problem
            assert (await verify("job-unknown-to-the-scheduler", "", 7)).allowed  # not job-scoped

            await h.stub.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="trainer-1"))  # lease lost
            requeued = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            assert requeued.attempt == 1 and not requeued.assignments
            assert "no running attempt" in (await verify(job.job_id, first, fencing)).problem

            await h.stub.RegisterWorker(register_request("trainer-1", "trainer"))
            await h.scheduler.allocator.tick()
            second_attempt = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            second = second_attempt.assignments[0].job_token
            assert second_attempt.attempt == 2 and second != first
            new_fencing = second_attempt.assignments[0].lease.fencing_token
            assert (await verify(job.job_id, second, new_fencing)).allowed
            old = await verify(job.job_id, first, new_fencing)
            assert not old.allowed and "earlier attempt" in old.problem

    asyncio.run(scenario())


def test_positive_verdicts_are_cached_so_a_step_costs_no_redis_round_trip(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h, \
                connect(redis_url) as client:
            await register_pool(h)
            job = await running_job(h)
            token, fencing = job.assignments[0].job_token, job.assignments[0].lease.fencing_token
            cached = JobTokenVerifier(client, ttl_seconds=60)
            assert not cached.allowed_cached(job.job_id, token, fencing)  # nothing verified yet
            assert (await cached.verify(job.job_id, token, fencing)).allowed
            assert cached.allowed_cached(job.job_id, token, fencing)  # the check without I/O agrees
            assert not cached.allowed_cached(job.job_id, token + "x", fencing)
            assert not cached.allowed_cached(job.job_id, token, fencing + 1)
            await client.hset(Keys().job(job.job_id), HASH_FIELD, "")  # Redis no longer knows it ...
            assert (await cached.verify(job.job_id, token, fencing)).allowed  # ... the cache answers
            assert not (await JobTokenVerifier(client).verify(job.job_id, token, fencing)).allowed

    asyncio.run(scenario())


def test_a_cached_token_dies_once_the_next_attempt_has_called(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h, connect(redis_url) as client:
            await register_pool(h)
            first = await running_job(h)
            old = first.assignments[0]
            cached = JobTokenVerifier(client, ttl_seconds=60)
            assert (await cached.verify(first.job_id, old.job_token, old.lease.fencing_token)).allowed
            await h.stub.DeregisterWorker(pb.DeregisterWorkerRequest(worker_id="trainer-1"))  # re-queued
            await h.stub.RegisterWorker(register_request("trainer-1", "trainer"))
            await h.scheduler.allocator.tick()
            new = (await h.stub.GetJob(pb.GetJobRequest(job_id=first.job_id))).job.assignments[0]
            assert (await cached.verify(first.job_id, new.job_token, new.lease.fencing_token)).allowed
            assert not cached.allowed_cached(first.job_id, old.job_token, old.lease.fencing_token)
            stale = await cached.verify(first.job_id, old.job_token, old.lease.fencing_token)
            assert not stale.allowed and "earlier attempt" in stale.problem

    asyncio.run(scenario())


def test_the_coordinators_reports_need_the_attempts_token(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)
            lease = next(a.lease for a in job.assignments if a.role == resources_pb2.ROLE_COORDINATOR)
            report = pb.ReportJobEventsRequest(lease=lease)
            for token in ("", "otj_" + "B" * 43):
                channel = authenticated_channel(h.address, ADMIN_KEY, job_token=token)
                async with channel:
                    error = await rpc_error(pb_grpc.SchedulerServiceStub(channel).ReportJobEvents(report))
                    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
                    assert reason_of(error) == "ERROR_REASON_JOB_TOKEN_INVALID"
                    assert error.details().startswith("metadata x-opentinker-job-token: ")
            channel = authenticated_channel(h.address, ADMIN_KEY, job_token=job.assignments[0].job_token)
            async with channel:
                stub = pb_grpc.SchedulerServiceStub(channel)
                malformed = resources_pb2.LeaseContext(job_id="job 1", lease_id=lease.lease_id, fencing_token=1)
                error = await rpc_error(stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=malformed)))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert error.details() == "lease.job_id: must be a job id without whitespace, got 'job 1'"
                assert (await stub.ReportJobEvents(report)).last_sequence == job.last_event_sequence
                finished = (await stub.FinishJob(pb.FinishJobRequest(
                    lease=lease, final_state=job_pb2.Job.STATE_SUCCEEDED))).job
                assert finished.state == job_pb2.Job.STATE_SUCCEEDED

    asyncio.run(scenario())
