"""The queued-jobs load: N jobs that stay QUEUED for a tenant whose quota allows exactly N,
listed, read, cancelled and replayed (see harness/load)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker.client.scheduler_requests import bearer_metadata, quota, submit_request
from harness.job_specs import math_env, rl_spec
from harness.load.base import CHANNEL_OPTIONS, RPC_TIMEOUT_S, UNPLACEABLE_DEVICES, S, rpc_text


def tiny_rl_spec(*, total_steps: int, seed: int = 3, **extra: Any) -> dict[str, Any]:
    """A valid RL job on the builtin tiny model that runs in seconds (`extra` adds spec fields)."""
    return rl_spec(total_steps, name="load", seed=seed, environment=math_env(seed, 2), eval_episodes=2,
                   checkpoint_every_steps=None) | extra


def unplaceable_spec() -> dict[str, Any]:
    """Valid, but needs more trainer devices on one worker than any worker here offers."""
    return tiny_rl_spec(total_steps=1, resources=[{"role": "ROLE_TRAINER", "device_count": UNPLACEABLE_DEVICES}])


@dataclass(kw_only=True)
class JobsReport:
    jobs: int
    submitted: int = 0
    over_quota_refusal: str = ""
    listed: int = 0
    queued_seen: int = 0
    """Listed by ListJobs as QUEUED with one event, at a queue position of their own."""
    got_queued: int = 0
    """The same, read with GetJob (every check_every-th job)."""
    cancelled: int = 0
    events_checked: int = 0
    submit_seconds: float = 0.0
    seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    lost_ids: set[str] = field(default_factory=set)
    """Submitted jobs that some later check did not find as it should (listed, QUEUED,
    cancelled, their two events)."""
    problems: list[str] = field(default_factory=list)

    @property
    def submits_per_s(self) -> float:
        return self.submitted / self.submit_seconds if self.submit_seconds else 0.0

    @property
    def lost(self) -> int:
        return len(self.lost_ids)


@contextlib.contextmanager
def _timed(into: dict[str, float], name: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        into[name] = round(time.monotonic() - started, 2)


async def bounded_gather(calls: Iterable[Callable[[], Awaitable[Any]]], *, concurrency: int) -> list[Any]:
    """Run the calls with at most `concurrency` in flight; results (or exceptions) in order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await call()
    return await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)


class Scheduler:
    """The raw SchedulerService stub with one key's metadata (no client-side retries: every
    refusal or loss is seen as the service answered it)."""

    def __init__(self, channel: grpc.aio.Channel, api_key: str) -> None:
        self.stub = pb_grpc.SchedulerServiceStub(channel)
        self.metadata = bearer_metadata(api_key)

    async def __call__(self, method: str, request: Any) -> Any:
        return await getattr(self.stub, method)(request, metadata=self.metadata, timeout=RPC_TIMEOUT_S)

    async def events(self, job_id: str, *, after: int = 0) -> list[job_pb2.JobEvent]:
        """Every event WatchJob streams until the job's end (the stream then closes)."""
        call = self.stub.WatchJob(pb.WatchJobRequest(job_id=job_id, after_sequence=after), metadata=self.metadata)
        return [response.event async for response in call]

    async def list_all(self, *, page_size: int, states: Sequence[int] = ()) -> list[job_pb2.Job]:
        jobs, token = [], ""
        while True:
            page = await self("ListJobs", pb.ListJobsRequest(page_size=page_size, page_token=token, states=states))
            jobs.extend(page.jobs)
            token = page.next_page_token
            if not token:
                return jobs


async def new_tenant(admin: Scheduler, *, max_queued_jobs: int) -> tuple[str, str]:
    """A fresh tenant allowed exactly `max_queued_jobs` queued jobs: (tenant_id, its key)."""
    tenant_id = f"load-{uuid.uuid4().hex[:10]}"
    created = await admin("CreateTenant", pb.CreateTenantRequest(
        tenant_id=tenant_id, quota=quota(max_queued_jobs=max_queued_jobs), request_id=uuid.uuid4().hex))
    return tenant_id, created.api_key_secret


async def queued_jobs_load(address: str, api_key: str, *, jobs: int, concurrency: int = 16,
                           page_size: int = 100, check_every: int = 1) -> JobsReport:
    """`jobs` jobs queued for a fresh tenant, all found QUEUED by ListJobs, cancelled and found
    CANCELLED; every `check_every`-th one also read with GetJob while queued and its events
    replayed with WatchJob at the end (each CancelJob answer already shows the second event)."""
    report = JobsReport(jobs=jobs)
    started = time.monotonic()
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        tenant_id, tenant_key = await new_tenant(Scheduler(channel, api_key), max_queued_jobs=jobs)
        tenant = Scheduler(channel, tenant_key)
        with _timed(report.phase_seconds, "submit"):
            job_ids = await _submit_all(tenant, report, concurrency)
            report.over_quota_refusal = await _one_too_many(tenant)
        with _timed(report.phase_seconds, "list+get"):
            await _check_listed_and_queued(tenant, job_ids, report, concurrency, page_size, check_every)
        with _timed(report.phase_seconds, "cancel"):
            await _cancel_all(tenant, job_ids, report, concurrency)
        with _timed(report.phase_seconds, "verify"):
            await _check_cancelled(tenant, job_ids, report, concurrency, page_size, check_every)
        usage = (await Scheduler(channel, api_key)("GetTenant", pb.GetTenantRequest(tenant_id=tenant_id))).tenant.usage
        if usage.queued_jobs or usage.running_jobs:
            report.problems.append(f"tenant {tenant_id} still counts {usage.queued_jobs} queued and "
                                   f"{usage.running_jobs} running jobs after cancelling all")
    report.seconds = time.monotonic() - started
    return report


async def _submit_all(tenant: Scheduler, report: JobsReport, concurrency: int) -> list[str]:
    spec = submit_request(unplaceable_spec(), None).spec
    started = time.monotonic()
    answers = await bounded_gather(
        [lambda: tenant("SubmitJob", pb.SubmitJobRequest(request_id=uuid.uuid4().hex, spec=spec))
         for _ in range(report.jobs)], concurrency=concurrency)
    report.submit_seconds = time.monotonic() - started
    job_ids = []
    for answer in answers:
        if isinstance(answer, BaseException):
            report.problems.append(f"SubmitJob failed: {rpc_text(answer)}")
        elif answer.job.state != S.STATE_QUEUED or not answer.created:
            report.problems.append(f"SubmitJob answered {S.State.Name(answer.job.state)} created={answer.created}")
        else:
            job_ids.append(answer.job.job_id)
    report.submitted = len(job_ids)
    if len(set(job_ids)) != len(job_ids):
        report.problems.append(f"SubmitJob returned {len(job_ids) - len(set(job_ids))} duplicate job ids")
    return job_ids


async def _one_too_many(tenant: Scheduler) -> str:
    """What a submit beyond the tenant's max_queued_jobs gets (it must be refused)."""
    spec = submit_request(unplaceable_spec(), None).spec
    try:
        answer = await tenant("SubmitJob", pb.SubmitJobRequest(request_id=uuid.uuid4().hex, spec=spec))
    except grpc.aio.AioRpcError as error:
        return error.code().name
    await tenant("CancelJob", pb.CancelJobRequest(job_id=answer.job.job_id, request_id=uuid.uuid4().hex))
    return "OK (accepted)"


async def _check_listed_and_queued(tenant: Scheduler, job_ids: list[str], report: JobsReport,
                                   concurrency: int, page_size: int, check_every: int) -> None:
    """Every job listed once, QUEUED with its first event at a queue position of its own; every
    `check_every`-th one read again with GetJob."""
    listed = await tenant.list_all(page_size=page_size)
    listed_ids = [job.job_id for job in listed]
    report.listed = len(set(listed_ids) & set(job_ids))
    if len(listed_ids) != len(set(listed_ids)):
        report.problems.append(f"ListJobs listed {len(listed_ids) - len(set(listed_ids))} jobs twice")
    report.lost_ids |= set(job_ids) - set(listed_ids)
    if set(listed_ids) != set(job_ids):
        report.problems.append(f"ListJobs: {len(set(job_ids) - set(listed_ids))} submitted jobs missing, "
                               f"{len(set(listed_ids) - set(job_ids))} unknown ones listed")
    report.queued_seen = _count_queued(listed, "ListJobs", report)
    sample = job_ids[::check_every]
    answers = await bounded_gather([lambda j=j: tenant("GetJob", pb.GetJobRequest(job_id=j)) for j in sample],
                                   concurrency=concurrency)
    got = []
    for job_id, answer in zip(sample, answers, strict=True):
        if isinstance(answer, BaseException):
            report.problems.append(f"GetJob {job_id}: {rpc_text(answer)}")
            report.lost_ids.add(job_id)
        else:
            got.append(answer.job)
    report.got_queued = _count_queued(got, "GetJob", report)


def _count_queued(jobs: Sequence[job_pb2.Job], source: str, report: JobsReport) -> int:
    """How many of `jobs` are QUEUED with exactly one event and a queue position no other has;
    each other one is a problem (and lost)."""
    positions: dict[int, int] = {}
    for job in jobs:
        positions[job.queue_position] = positions.get(job.queue_position, 0) + 1
    good = 0
    for job in jobs:
        if job.state == S.STATE_QUEUED and job.last_event_sequence == 1 and job.queue_position >= 1 \
                and positions[job.queue_position] == 1:
            good += 1
        else:
            report.problems.append(f"{source} {job.job_id}: {S.State.Name(job.state)}, last event "
                                   f"{job.last_event_sequence}, queue position {job.queue_position} "
                                   f"(held by {positions[job.queue_position]} jobs)")
            report.lost_ids.add(job.job_id)
    return good


async def _cancel_all(tenant: Scheduler, job_ids: list[str], report: JobsReport, concurrency: int) -> None:
    answers = await bounded_gather(
        [lambda j=j: tenant("CancelJob", pb.CancelJobRequest(job_id=j, request_id=uuid.uuid4().hex, reason="load"))
         for j in job_ids], concurrency=concurrency)
    for job_id, answer in zip(job_ids, answers, strict=True):
        if isinstance(answer, BaseException):
            report.problems.append(f"CancelJob {job_id}: {rpc_text(answer)}")
            report.lost_ids.add(job_id)
        elif answer.job.state != S.STATE_CANCELLED or answer.job.last_event_sequence != 2:
            report.problems.append(f"CancelJob {job_id} answered {S.State.Name(answer.job.state)}, last event "
                                   f"{answer.job.last_event_sequence}")
            report.lost_ids.add(job_id)
        else:
            report.cancelled += 1


async def _check_cancelled(tenant: Scheduler, job_ids: list[str], report: JobsReport, concurrency: int,
                           page_size: int, check_every: int) -> None:
    cancelled = {job.job_id for job in await tenant.list_all(page_size=page_size, states=[S.STATE_CANCELLED])}
    still_queued = await tenant.list_all(page_size=page_size, states=[S.STATE_QUEUED])
    report.lost_ids |= set(job_ids) - cancelled
    if cancelled != set(job_ids) or still_queued:
        report.problems.append(f"after cancelling: {len(set(job_ids) - cancelled)} jobs not listed CANCELLED, "
                               f"{len(still_queued)} listed QUEUED")
    replayed = job_ids[::check_every]
    replays = await bounded_gather([lambda j=j: tenant.events(j) for j in replayed], concurrency=concurrency)
    for job_id, events in zip(replayed, replays, strict=True):
        if isinstance(events, BaseException) or not _queued_then_cancelled(events):
            report.lost_ids.add(job_id)
        if isinstance(events, BaseException):
            report.problems.append(f"WatchJob {job_id}: {rpc_text(events)}")
        elif not _queued_then_cancelled(events):
            found = [(e.sequence, e.WhichOneof("payload")) for e in events]
            report.problems.append(f"WatchJob {job_id}: events {found}")
        else:
            report.events_checked += 1


def _queued_then_cancelled(events: Sequence[job_pb2.JobEvent]) -> bool:
    return [e.sequence for e in events] == [1, 2] and transitions(events) == [
        (S.STATE_UNSPECIFIED, S.STATE_QUEUED), (S.STATE_QUEUED, S.STATE_CANCELLED)]


def transitions(events: Sequence[job_pb2.JobEvent]) -> list[tuple[int, int]]:
    return [(e.state_changed.from_state, e.state_changed.to_state) for e in events
            if e.WhichOneof("payload") == "state_changed"]
