"""Job use cases: submit, get, list, cancel, watch, report events, finish."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol
from dataclasses import dataclass

from opentinker_runtime.edge.lease import LeaseContext
from opentinker_scheduler.checkpoint_models import check_checkpoint_contexts
from opentinker_scheduler.config import SchedulerConfig
from opentinker_scheduler.envhosts import EnvHostDirectory, check_addresses
from opentinker_scheduler.errors import FailedPrecondition, InvalidArgument, NotFound, OutOfRange, QuotaExceeded, StaleLease
from opentinker_scheduler.event_log import REPLAY_BATCH, EventLog
from opentinker_scheduler.events import CheckpointSaved, JobEvent, LogLine, Payload, SamplesReported
from opentinker_scheduler.job_store import AppendStatus, Created, JobStore, Start, StartResult, SubmitRefused
from opentinker_scheduler.leases import LeaseTable
from opentinker_scheduler.lifecycle import Lifecycle
from opentinker_scheduler.model_context import check_context_limits
from opentinker_scheduler.model import Caller, Job, JobSpecFacts, JobState, JobType, Page, QueuedJob
from opentinker_scheduler.paging import decode_offset, decode_token, encode_token, page_size
from opentinker_scheduler.reports import build_report, check_samples_query
from opentinker_scheduler.spec_paths import CheckpointOwners, check_tenant_paths

MAX_REQUEST_ID_LENGTH = 128
CAS_RETRIES = 5
FINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED)
EPISODE_JOB_TYPES = (JobType.RL, JobType.INFERENCE)
"""Jobs that play episodes in their environments (their env names are checked at submit)."""


class Admissions(Protocol):
    """Who plans a job's start at its submission (the allocator of this replica)."""

    def draft_admission(self, job: QueuedJob) -> Start | None: ...

    def admission_done(self, start: Start, result: StartResult) -> None: ...

    def devices_freed(self) -> None: ...


def queued_job_of(job: Job) -> QueuedJob:
    return QueuedJob(job_id=job.job_id, tenant_id=job.tenant_id, state=job.state, resources=job.resources,
                     device_count=sum(r.device_count for r in job.resources), create_time_ms=job.create_time_ms,
                     type=job.type)


def check_id(field: str, value: str, *, required: bool = True) -> None:
    """Ids become parts of Redis keys: non-empty (when required), no whitespace, bounded."""
    if not value and required:
        raise InvalidArgument(field, "must be set")
    if any(ch.isspace() for ch in value) or len(value) > MAX_REQUEST_ID_LENGTH:
        raise InvalidArgument(field, f"must be at most {MAX_REQUEST_ID_LENGTH} characters "
                              "without whitespace")


@dataclass(frozen=True, kw_only=True)
class JobService:
    config: SchedulerConfig
    store: JobStore
    events: EventLog
    leases: LeaseTable
    lifecycle: Lifecycle
    envhosts: EnvHostDirectory
    on_queued: Callable[[QueuedJob], None] | None = None
    """Told of every job queued here: this replica's allocator (no pub/sub hop, see `Allocator.queued`)."""
    admissions: Admissions | None = None
    """This replica's allocator, asked for a START to send with each SUBMIT (start at submit)."""

    @property
    def checkpoints(self) -> CheckpointOwners:
        """Who owns which checkpoint (recorded from CheckpointSaved reports, checked at SubmitJob)."""
        return CheckpointOwners(client=self.store.client, keys=self.store.keys)

    async def submit(self, facts: JobSpecFacts, spec_blob: bytes, *, caller: Caller, request_id: str,
                     validate_only: bool = False) -> tuple[Job, bool]:
        """Queue a resolved spec for the caller's tenant once the caller may name what it names;
        (job, created). A reused request_id returns the first job."""
        check_id("request_id", request_id, required=False)
        check_addresses(facts.envhost_fields, caller)  # who may set a field comes first
        facts.raise_problem()
        check_context_limits(facts.plan)  # builtin models; checkpoints of them: check_checkpoint_contexts
        await self.envhosts.check_names(facts.envhost_fields, caller)
        if facts.type in EPISODE_JOB_TYPES:  # SFT jobs ignore their environment
            await self.envhosts.check_env_names(facts.environments, caller)
        job = self._new_job(facts, spec_blob, caller.tenant_id)
        check_tenant_paths(facts.path_fields, caller, self.config.shared_model_dir)
        await self.checkpoints.check_spec(facts.checkpoint_refs, caller)
        await check_checkpoint_contexts(facts, self.store)
        if validate_only:
            return dataclasses.replace(job, job_id=""), False
        try:
            created, job_id, stored = await self._create(job, request_id=request_id or job.job_id,
                                                         spec_hash=hashlib.sha256(spec_blob).hexdigest())
        except SubmitRefused as refused:
            raise quota_refusal(job, refused) from None
        if created is Created.REUSED:
            raise InvalidArgument("request_id", f"was already used for job {job_id} with a "
                                  "different spec; use a new request_id", reason="REQUEST_ID_REUSED")
        if stored is None:  # the earlier job of this request_id, as it is now
            return await self.get(job_id, caller), False
        if self.on_queued is not None and stored.state is JobState.QUEUED:  # (the allocator ignores its own wake-up message)
            self.on_queued(queued_job_of(stored))
        return stored, True

    async def _create(self, job: Job, *, request_id: str, spec_hash: str) -> tuple[Created, str, Job | None]:
        """`store.create`, with the job's START in the same round trip when the allocator has
        a place for it now (then the job comes back RUNNING)."""
        start = self.admissions.draft_admission(queued_job_of(job)) if self.admissions is not None else None
        if start is None:
            return await self.store.create(job, request_id=request_id, spec_hash=spec_hash)
        result = StartResult(status="error", detail="SUBMIT failed")
        try:
            created, job_id, stored, result = await self.store.create_and_start(
                job, start, request_id=request_id, spec_hash=spec_hash, ttl_ms=self.config.worker_ttl_ms)
        finally:
            self.admissions.admission_done(start, result)
        return created, job_id, stored

    def _new_job(self, facts: JobSpecFacts, spec_blob: bytes, tenant_id: str) -> Job:
        now = self.store.clock.now_ms()
        return Job(job_id=f"job-{uuid.uuid4().hex}", tenant_id=tenant_id,
                   type=facts.type, priority=facts.plan.priority, spec_blob=spec_blob, resources=facts.resources,
                   state=JobState.QUEUED, create_time_ms=now, update_time_ms=now,
                   retries_left=facts.plan.training.max_retries)

    async def get(self, job_id: str, caller: Caller) -> Job:
        """The job; NOT_FOUND for another tenant's job (an admin key sees every job)."""
        check_id("job_id", job_id)
        job = await self.store.get(job_id)
        if job is None or not (caller.admin or job.tenant_id == caller.tenant_id):
            raise NotFound(f"job {job_id} not found")
        return job

    async def require_visible(self, job_id: str, caller: Caller) -> JobState:
        """`get`'s NOT_FOUND check without reading the whole job: its state."""
        check_id("job_id", job_id)
        state, tenant_id = await self.store.state_of(job_id)
        if state is None or not (caller.admin or tenant_id == caller.tenant_id):
            raise NotFound(f"job {job_id} not found")
        return state

    async def list(self, caller: Caller, *, size: int, token: str, states: Sequence[JobState],
                   job_type: JobType) -> Page[Job]:
        """Newest first, filtered by state (any of) and type; `token` resumes a previous page."""
        limit = page_size(size)
        position = decode_token("jobs", token)
        before = int(position) if position and position.isdigit() else None
        if position and before is None:
            raise InvalidArgument("page_token", "is not a next_page_token returned by ListJobs")
        found = await self._collect(caller.tenant_id, limit + 1, before, set(states), job_type)
        more = len(found) > limit
        page = found[:limit]
        next_token = encode_token("jobs", str(page[-1][1])) if more else ""
        return Page(items=[job for job, _ in page], next_page_token=next_token)

    async def _collect(self, tenant_id: str, wanted: int, before: int | None, states: set[JobState],
                       job_type: JobType) -> list[tuple[Job, int]]:
        found: list[tuple[Job, int]] = []
        while len(found) < wanted:
            rows = await self.store.index_page(tenant_id, before_order=before,
                                               count=max(wanted, 100))
            if not rows:
                break
            for job_id, order in rows:
                job = await self.store.get(job_id)
                if job and (not states or job.state in states) and job_type in (JobType.UNSPECIFIED, job.type):
                    found.append((job, order))
            before = rows[-1][1]
        return found[:wanted]

    async def cancel(self, job_id: str, caller: Caller, *, reason: str = "") -> Job:
        """QUEUED: CANCELLED now. ALLOCATING/RUNNING: cancel_requested; CANCELLED once every
        assigned worker was told (Heartbeat stop_job_ids) or lost. Idempotent."""
        for _ in range(CAS_RETRIES):
            job = await self.get(job_id, caller)
            if job.state is JobState.CANCELLED or job.cancel_requested:
                return job
            if job.state.terminal:
                raise FailedPrecondition(f"job {job_id} already ended {job.state}; only queued, "
                                         "allocating or running jobs can be cancelled")
            if await self._try_cancel(job, reason or "cancelled by the user"):
                return await self.get(job_id, caller)
        raise FailedPrecondition(f"job {job_id} kept changing state; retry the cancel",
                                 reason="")

    async def _try_cancel(self, job: Job, reason: str) -> bool:
        if job.state is JobState.QUEUED:
            result = await self.lifecycle.end(job.job_id, expected=job.state,
                                              to=JobState.CANCELLED, reason=reason)
            return result.ok
        workers = sorted({a.worker_id for a in job.assignments})
        event = LogLine(level="WARNING", source="scheduler", message=f"cancel requested: {reason}")
        code, _ = await self.store.request_cancel(job.job_id, expected=job.state, event=event,
                                                  workers=workers)
        if code == 1 and job.state is JobState.RUNNING and not workers:
            await self.lifecycle.end(job.job_id, expected=job.state, to=JobState.CANCELLED,
                                     reason=reason)
        return code != 0

    async def watch(self, job_id: str, caller: Caller, *, after_sequence: int,
                    follow_after_end: bool) -> AsyncIterator[JobEvent]:
        """Stored events after `after_sequence`, then live ones; ends after the terminal event
        (unless follow_after_end), or at once when the job already ended before it. Live streams
        are capped per tenant (QUOTA: STREAM_LIMIT); live events come from the shared EventHub.
        The job's state and its first stored events are read in one step (one round trip)."""
        if after_sequence < 0:
            raise InvalidArgument("after_sequence", f"must be >= 0, got {after_sequence}")
        check_id("job_id", job_id)
        state, tenant_id, stored = await self.store.state_and_events(job_id, after_sequence, REPLAY_BATCH)
        if state is None or not (caller.admin or tenant_id == caller.tenant_id):
            raise NotFound(f"job {job_id} not found")
        with self.events.streams.admitted(caller):
            last = after_sequence
            async for event in self.events.replay_from(job_id, stored, count=REPLAY_BATCH):
                if event.sequence > last + 1 and last == after_sequence:
                    raise OutOfRange(f"events {after_sequence + 1}..{event.sequence - 1} of job {job_id} were "
                                     f"trimmed (a job keeps its last {self.config.max_events_per_job} events); "
                                     f"watch again with after_sequence >= {event.sequence - 1}")
                yield event
                last = event.sequence
                if event.is_terminal and not follow_after_end:
                    return
            if not follow_after_end and state.terminal:
                return  # ended before the read: its terminal event (written with the state) was replayed
            async for event in self.events.follow(job_id, last):
                yield event
                if event.is_terminal and not follow_after_end:
                    return

    async def samples(self, job_id: str, caller: Caller, *, step: int | None = None, split: str = "",
                      size: int = 0, token: str = "") -> Page:
        """The job's SamplesReported events, newest first, filtered by step and split; a page of
        them (its token: the sequence below which the next page starts)."""
        await self.require_visible(job_id, caller)
        limit = check_samples_query(step=step, split=split, page_size=size)
        before = decode_offset("samples", token)
        found: list[SamplesReported] = []
        last = 0
        async for event in self.events.newest_first(job_id, before=before):
            payload = event.payload
            if isinstance(payload, SamplesReported) and (step is None or payload.step == step) \
                    and (not split or payload.split == split):
                found.append(payload)
                last = event.sequence
                if len(found) == limit:
                    return Page(items=list(found), next_page_token=encode_token("samples", str(last)))
        return Page(items=list(found), next_page_token="")

    async def report(self, lease: LeaseContext, payloads: Sequence[Payload | None], *,
                     caller: Caller, request_id: str) -> int:
        """Append events for a job the caller holds a current lease on; the last sequence."""
        caller.require_admin("ReportJobEvents (a worker's call)")
        check_lease_context(lease)
        check_id("request_id", request_id, required=False)
        report = build_report(payloads, lease=lease, request_id=request_id,
                              now_ms=self.store.clock.now_ms())
        status, sequence = await self.store.append(lease.job_id, report)
        if status is AppendStatus.STALE:
            await self.get(lease.job_id, caller)  # NOT_FOUND beats a stale lease for an unknown job
            raise stale_lease(lease)
        if status is AppendStatus.MISSING:
            raise NotFound(f"job {lease.job_id} not found")
        if any(isinstance(p, CheckpointSaved) for p in report.payloads) and (job := await self.store.get(lease.job_id)):
            await self.checkpoints.record(job.tenant_id, report.payloads)
        return sequence

    async def finish(self, lease: LeaseContext, final_state: JobState, *, caller: Caller, message: str) -> Job:
        """The Coordinator ends a RUNNING job: SUCCEEDED, or FAILED (CANCELLED when a cancel was
        requested). Retrying with the same final state returns the ended job."""
        caller.require_admin("FinishJob (the Coordinator's call)")
        check_lease_context(lease)
        if final_state not in FINAL_STATES:
            raise InvalidArgument("final_state", f"must be STATE_SUCCEEDED or STATE_FAILED, got {final_state}")
        finished = await self.lifecycle.finish(lease, final_state,
                                               reason=lambda to: message or f"finished: {to.lower()}")
        if finished.job is not None:
            if self.admissions is not None:
                self.admissions.devices_freed()
            return finished.job
        if finished.status == "missing":
            raise NotFound(f"job {lease.job_id} not found")
        if finished.status == "stale":
            raise stale_lease(lease)
        return await self._finish_not_running(lease, final_state, caller=caller, message=message)

    async def _finish_not_running(self, lease: LeaseContext, final_state: JobState, *, caller: Caller,
                                  message: str) -> Job:
        """`finish` for a job FINISH found not RUNNING: an ended one (a retry), or one that moved on."""
        for _ in range(CAS_RETRIES):
            state = await self.require_visible(lease.job_id, caller)
            if state.terminal:
                return self._already_ended(await self.get(lease.job_id, caller), final_state)
            if not await self.leases.is_current(lease):
                raise stale_lease(lease)
            to = final_state
            if final_state is JobState.FAILED and await self.store.cancel_requested(lease.job_id):
                to = JobState.CANCELLED
            result = await self.lifecycle.end(lease.job_id, expected=state, to=to,
                                              reason=message or f"finished: {to.lower()}")
            if result.ok:
                return await self.get(lease.job_id, caller)
        raise FailedPrecondition(f"job {lease.job_id} kept changing state; retry", reason="")

    @staticmethod
    def _already_ended(job: Job, final_state: JobState) -> Job:
        cancelled_failure = job.state is JobState.CANCELLED and final_state is JobState.FAILED
        if job.state is final_state or cancelled_failure:
            return job
        raise FailedPrecondition(f"job {job.job_id} already ended {job.state}")


def quota_refusal(job: Job, refused: SubmitRefused) -> QuotaExceeded | FailedPrecondition:
    if refused.limit == "max_devices":
        devices = sum(r.device_count for r in job.resources)
        return FailedPrecondition(
            f"spec.resources: the job needs {devices} devices but tenant {job.tenant_id}'s quota "
            f"max_devices is {refused.value}, so it could never start; ask fewer devices or an admin "
            "to raise the quota", reason="QUOTA_EXCEEDED")
    return QuotaExceeded(f"tenant {job.tenant_id} already has {refused.value} queued jobs (its quota "
                         "max_queued_jobs); wait for some to start or cancel some")


def check_lease_context(lease: LeaseContext) -> None:
    check_id("lease.job_id", lease.job_id)
    check_id("lease.lease_id", lease.lease_id)
    if lease.fencing_token <= 0:
        raise InvalidArgument("lease.fencing_token", "must be the positive token of the assignment")


def stale_lease(lease: LeaseContext) -> StaleLease:
    return StaleLease(f"lease {lease.lease_id} (fencing token {lease.fencing_token}) is not a "
                      f"current lease of job {lease.job_id}: it expired, was released or was superseded")
