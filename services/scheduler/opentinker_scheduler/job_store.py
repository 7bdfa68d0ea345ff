"""Jobs in Redis: the record (a hash), its event stream, the queue and the per-tenant index.

Every state change goes through `transition` (compare-and-set on the state plus the StateChanged
event, one Lua script), so two writers (the allocator, CancelJob, FinishJob) can never both win.
Each change that happened, and each event appended, is counted (`opentinker_scheduler.metrics`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Mapping, Sequence
import uuid
from dataclasses import dataclass, field

import redis.asyncio
import redis.exceptions
from redis.commands.core import AsyncScript

from opentinker_runtime.core.redis_store import Keys
from opentinker_runtime.edge.lease import LeaseContext
from opentinker_scheduler.clock import Clock
from opentinker_scheduler.metrics import count_events, count_state_change
from opentinker_scheduler.codec import assignment_prefix, decode_assignments, decode_job, job_fields, pairs
from opentinker_scheduler.events import KIND_OF, JobEvent, Payload, StateChanged, decode_entry, encode_payload
from opentinker_scheduler.job_tokens import JobTokenDraft
from opentinker_scheduler.leases import LeaseDraft, draft_keys, drafts_json
from opentinker_scheduler.lua import Scripts
from opentinker_scheduler.model import Assignment, Job, JobState, QueuedJob


class Created(enum.StrEnum):
    CREATED = "created"
    EXISTING = "existing"  # same request_id, same spec: the earlier job
    REUSED = "reused"      # same request_id, different spec: refused


class SubmitRefused(Exception):
    """The tenant's quota refuses the job: `limit` names the quota field, `value` its value."""

    def __init__(self, limit: str, value: int) -> None:
        super().__init__(f"{limit}={value}")
        self.limit, self.value = limit, value


@dataclass(frozen=True, kw_only=True)
class StartResult:
    """What START did: `ok`, or why not (`state`, `busy`, `worker_unavailable`, `quota_jobs`,
    `quota_devices`) with a detail (the state found, the busy slot key, the usage)."""

    status: str
    detail: str = ""
    fencing_tokens: tuple[str, ...] = ()
    """The fencing token of each lease, in the order of the drafts (`ok` only)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def of_reply(cls, reply: Sequence[bytes]) -> StartResult:
        status, detail, *tokens = reply
        return cls(status=status.decode(), detail=detail.decode(),
                   fencing_tokens=tuple(tokens[0].decode().split(",")) if tokens else ())


@dataclass(frozen=True, kw_only=True)
class Start:
    """One job to start: its leases, where they are (for the assignments and the events), its token."""

    job: Job | QueuedJob
    drafts: Sequence[LeaseDraft]
    addresses: Sequence[str]
    where: str
    job_token: JobTokenDraft


class AppendStatus(enum.StrEnum):
    OK = "ok"
    DUPLICATE = "duplicate"
    STALE = "stale"
    MISSING = "missing"


@dataclass(frozen=True, kw_only=True)
class Transition:
    ok: bool
    current: str  # the state found when refused ('' = no such job, or 'cancel_requested')
    sequence: int = 0


@dataclass(frozen=True, kw_only=True)
class Finished:
    """What FINISH did: `ok` (and the ended `job`), `missing`, `stale` (the lease is not current)
    or `state` (the job is not RUNNING: `state` says what it is)."""

    status: str
    state: str = ""
    job: Job | None = None


@dataclass(frozen=True, kw_only=True)
class Report:
    """Events reported by a worker: checked against `lease`, deduplicated by `request_id`."""

    payloads: Sequence[Payload]
    lease: LeaseContext | None = None
    request_id: str = ""
    job_fields: Mapping[str, str | int] | None = None
    """Hash fields of the job set with the events (its progress, the checkpoint to resume from)."""
    metrics: Mapping[str, float] | None = None


@dataclass(frozen=True, kw_only=True)
class JobStore:
    client: redis.asyncio.Redis
    keys: Keys
    scripts: Scripts
    clock: Clock
    request_id_ttl_s: int
    aging_ms: int = 60_000
    """Queue aging: waiting this long is worth one priority point."""
    origin: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Sent as the wake-up message of a submission, so this replica's allocator, which its own
    SubmitJob wakes directly, can ignore its own messages."""

    async def create(self, job: Job, *, request_id: str, spec_hash: str) -> tuple[Created, str, Job | None]:
        """Store a QUEUED job with its first event, once per (tenant, request_id): (what
        happened, the job id, the job as stored when CREATED: `job` with its first event and
        queue position)."""
        reply = await self.scripts.submit(*self._submit_call(job, request_id=request_id, spec_hash=spec_hash))
        return self._submitted(job, reply)

    async def create_and_start(self, job: Job, start: Start, *, request_id: str, spec_hash: str,
                               ttl_ms: int) -> tuple[Created, str, Job | None, StartResult]:
        """`create`, and `start` of the job just created, in ONE round trip: the two scripts go
        in one pipeline, so START runs in Redis right after SUBMIT (and refuses with `state`,
        changing nothing, when SUBMIT created no job). The job comes back as stored: RUNNING
        when START succeeded, QUEUED otherwise."""
        now = self.clock.now_ms()
        submitted, started = await self._run_pipelined([
            (self.scripts.submit, *self._submit_call(job, request_id=request_id, spec_hash=spec_hash)),
            (self.scripts.start, *self._start_call(start, now=now, ttl_ms=ttl_ms))])
        created, job_id, stored = self._submitted(job, submitted)
        result = StartResult.of_reply(started)
        if result.ok and stored is not None:
            _count_state_changes(JobState.ALLOCATING, JobState.RUNNING)
            stored = _running(stored, start, result, now=now)
        return created, job_id, stored, result

    def _submit_call(self, job: Job, *, request_id: str, spec_hash: str) -> tuple[list[str], list]:
        event = encode_payload(StateChanged(from_state=JobState.UNSPECIFIED,
                                            to_state=JobState.QUEUED, reason="submitted"))
        fields = [part for pair in job_fields(job, spec_hash=spec_hash).items() for part in pair]
        keys = [self.keys.idempotency(job.tenant_id, request_id), self.keys.job(job.job_id),
                self.keys.job_events(job.job_id), self.keys.tenant_job_index(job.tenant_id),
                self.keys.job_index(), self.keys.job_queue(), self.keys.job_counter(),
                self.keys.tenant(job.tenant_id), self.keys.tenant_usage()]
        args = [spec_hash, job.job_id, job.create_time_ms, self.request_id_ttl_s, job.priority,
                event, self.aging_ms, job.tenant_id, self.keys.allocator_wake(),
                sum(r.device_count for r in job.resources), self.origin, *fields]
        return keys, args

    @staticmethod
    def _submitted(job: Job, reply: Sequence) -> tuple[Created, str, Job | None]:
        status, detail, *rank = reply
        if status in (b"quota", b"too_big"):
            raise SubmitRefused("max_queued_jobs" if status == b"quota" else "max_devices", int(detail))
        created = Created(status.decode())
        if created is not Created.CREATED:
            return created, detail.decode(), None
        _count_state_changes(JobState.QUEUED)
        stored = dataclasses.replace(job, last_event_sequence=1, queue_position=int(rank[0]) + 1)
        return created, job.job_id, stored

    async def get_many(self, job_ids: Sequence[str]) -> dict[str, Job]:
        """The jobs that exist among `job_ids`, in one round trip."""
        async with self.client.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hgetall(self.keys.job(job_id)).hgetall(self.keys.job_metrics(job_id))
                pipe.zrank(self.keys.job_queue(), job_id)
            replies = await pipe.execute()
        jobs = [decode_job(raw, metrics=metrics, queue_rank=rank) for raw, metrics, rank
                in zip(replies[::3], replies[1::3], replies[2::3], strict=True) if raw]
        return {job.job_id: job for job in jobs}

    async def get(self, job_id: str) -> Job | None:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.job(job_id)).hgetall(self.keys.job_metrics(job_id))
            pipe.zrank(self.keys.job_queue(), job_id)
            raw, metrics, rank = await pipe.execute()
        return decode_job(raw, metrics=metrics, queue_rank=rank) if raw else None

    async def transition(self, job_id: str, *, expected: JobState, to: JobState, reason: str,
                         fields: Mapping[str, str | int] | None = None,
                         refuse_if_cancel_requested: bool = False) -> Transition:
        """Move `expected` -> `to` and append the StateChanged event, or refuse. A job leaving
        RUNNING (or ALLOCATING) loses all its leases in the same script."""
        event = encode_payload(StateChanged(from_state=expected, to_state=to, reason=reason))
        pairs = [part for pair in (fields or {}).items() for part in pair]
        keys = [self.keys.job(job_id), self.keys.job_events(job_id), self.keys.job_queue(),
                self.keys.tenant_usage(), self.keys.running_jobs(), self.keys.job_leases(job_id),
                self.keys.lease_expiry(), self.keys.job_stopping(job_id)]
        args = [self.clock.now_ms(), expected, to, event, int(refuse_if_cancel_requested),
                self.aging_ms, self.keys.allocator_wake(), json.dumps(self.keys.lease_key_prefixes()), *pairs]
        ok, current = await self.scripts.transition(keys=keys, args=args)
        if ok:
            _count_state_changes(to)
            return Transition(ok=True, current=str(to), sequence=int(current))
        return Transition(ok=False, current=current.decode() if current else "")

    async def finish_running(self, lease: LeaseContext, *, final_state: JobState,
                             reason: Callable[[JobState], str]) -> Finished:
        """FinishJob's common case in one round trip (the FINISH script): a RUNNING job whose
        lease is current moves to `final_state` (CANCELLED for FAILED once a cancel was
        requested), with `reason(state)` as its status message and its StateChanged reason, and
        loses its leases; the ended job comes back. Anything else changes nothing and says why."""
        now = self.clock.now_ms()
        ends = (final_state, JobState.CANCELLED)
        reasons = [reason(to) for to in ends]
        events = [encode_payload(StateChanged(from_state=JobState.RUNNING, to_state=to, reason=text))
                  for to, text in zip(ends, reasons, strict=True)]
        keys = [self.keys.job(lease.job_id), self.keys.job_events(lease.job_id), self.keys.job_queue(),
                self.keys.tenant_usage(), self.keys.running_jobs(), self.keys.job_leases(lease.job_id),
                self.keys.lease_expiry(), self.keys.job_stopping(lease.job_id), self.keys.lease(lease.lease_id),
                self.keys.job_metrics(lease.job_id)]
        args = [now, final_state, events[0], reasons[0], events[1], reasons[1], self.aging_ms,
                self.keys.allocator_wake(), json.dumps(self.keys.lease_key_prefixes()), lease.job_id,
                lease.fencing_token]
        status, *rest = await self.scripts.finish(keys=keys, args=args)
        if status != b"ok":
            return Finished(status=status.decode(), state=rest[0].decode() if rest else "")
        to = JobState(rest[0].decode())
        _count_state_changes(to)
        job = decode_job(pairs(rest[1]), metrics=pairs(rest[2]), queue_rank=None)
        return Finished(status="ok", state=str(to), job=job)

    async def state_and_events(self, job_id: str, after_sequence: int,
                               count: int) -> tuple[JobState | None, str, list[JobEvent]]:
        """(state, tenant, the first `count` stored events after `after_sequence`), read in one
        step (WATCH_FROM); (None, '', []) when there is no such job."""
        reply = await self.scripts.watch_from(keys=[self.keys.job(job_id), self.keys.job_events(job_id)],
                                              args=[after_sequence + 1, count])
        if not reply:
            return None, "", []
        state, tenant, entries = reply
        return (JobState(state.decode()), tenant.decode(),
                [decode_entry(job_id, entry_id, pairs(fields)) for entry_id, fields in entries])

    async def start(self, job: Job | QueuedJob, drafts: Sequence[LeaseDraft], *, addresses: Sequence[str],
                    ttl_ms: int, where: str, job_token: JobTokenDraft) -> StartResult:
        """QUEUED -> ALLOCATING -> RUNNING with every lease in `drafts` and the attempt's job
        token (its nonce and hash), atomically (one round trip), within the tenant's quota; or
        nothing at all."""
        start = Start(job=job, drafts=drafts, addresses=addresses, where=where, job_token=job_token)
        return (await self.start_many([start], ttl_ms=ttl_ms))[0]

    async def start_many(self, starts: Sequence[Start], *, ttl_ms: int,
                         status_messages: Mapping[str, str] | None = None) -> list[StartResult]:
        """`start` for each of `starts`, one START script each (every job all or nothing on its
        own), sent in one pipelined round trip with `set_status_messages(status_messages)`; the
        results in the order of `starts`."""
        now = self.clock.now_ms()
        calls = [(self.scripts.start, *self._start_call(start, now=now, ttl_ms=ttl_ms)) for start in starts]
        if status_messages:
            calls.append(self._note_waiting_call(status_messages))
        replies = (await self._run_pipelined(calls))[:len(starts)]
        results = [StartResult.of_reply(reply) for reply in replies]
        for result in results:
            if result.ok:
                _count_state_changes(JobState.ALLOCATING, JobState.RUNNING)
        return results

    def _start_call(self, start: Start, *, now: int, ttl_ms: int) -> tuple[list[str], list[str | int]]:
        job, drafts = start.job, start.drafts
        keys = [self.keys.job(job.job_id), self.keys.job_events(job.job_id), self.keys.job_queue(),
                self.keys.fencing_counter(), self.keys.lease_expiry(), self.keys.job_leases(job.job_id),
                self.keys.tenant(job.tenant_id), self.keys.tenant_usage(), self.keys.running_jobs(),
                *draft_keys(self.keys, drafts)]
        events = [encode_payload(StateChanged(from_state=JobState.QUEUED, to_state=JobState.ALLOCATING,
                                              reason=f"leasing {start.where}")),
                  encode_payload(StateChanged(from_state=JobState.ALLOCATING, to_state=JobState.RUNNING,
                                              reason=f"running: {start.where}"))]
        prefixes = [assignment_prefix(d, address) for d, address in zip(drafts, start.addresses, strict=True)]
        args = [now, ttl_ms, drafts_json(drafts), *events, job.tenant_id,
                start.job_token.nonce, start.job_token.token_hash, *prefixes]
        return keys, args

    async def _run_pipelined(self, calls: Sequence[tuple[AsyncScript, list[str], list]]) -> list:
        """EVALSHA each (script, keys, args) in one round trip. A script Redis lost (a restart or a
        flush: NOSCRIPT, nothing ran) is loaded again and the calls it refused are resent."""
        replies: list = [None] * len(calls)
        pending = list(range(len(calls)))
        for attempt in range(2):
            async with self.client.pipeline(transaction=False) as pipe:
                for index in pending:
                    script, keys, args = calls[index]
                    pipe.evalsha(script.sha, len(keys), *keys, *args)
                answers = await pipe.execute(raise_on_error=False)
            refused = []
            for index, answer in zip(pending, answers, strict=True):
                if isinstance(answer, redis.exceptions.NoScriptError) and attempt == 0:
                    refused.append(index)
                elif isinstance(answer, Exception):
                    raise answer
                else:
                    replies[index] = answer
            if not refused:
                break
            for script in {calls[index][0].sha: calls[index][0] for index in refused}.values():
                await self.client.script_load(script.script)
            pending = refused
        return replies

    async def assignments_without_lease(self) -> list[tuple[str, Assignment]]:
        """(job id, assignment) of RUNNING jobs whose lease record is gone (one consistent read):
        what a scheduler killed between releasing a lease and re-queueing its job would leave."""
        job_prefix = self.keys.job("x")[:-1]
        reply = await self.scripts.lost_leases(keys=[self.keys.running_jobs()],
                                               args=[job_prefix, self.keys.lease_key_prefixes()["record"]])
        lost = {(job_id.decode(), lease_id.decode()) for job_id, lease_id in zip(reply[::2], reply[1::2], strict=True)}
        jobs = await self.get_many(sorted({job_id for job_id, _ in lost}))
        return [(job_id, a) for job_id, job in jobs.items() for a in job.assignments
                if (job_id, a.lease.lease_id) in lost]

    async def state_of(self, job_id: str) -> tuple[JobState | None, str]:
        """(state, tenant) of a job, cheaply; (None, '') when there is none."""
        state, tenant = await self.client.hmget(self.keys.job(job_id), ["state", "tenant_id"])
        return (JobState(state.decode()) if state else None), (tenant or b"").decode()

    async def cancel_requested(self, job_id: str) -> bool:
        return await self.client.hget(self.keys.job(job_id), "cancel_requested") == b"1"

    async def request_cancel(self, job_id: str, *, expected: JobState, event: Payload,
                             workers: Sequence[str]) -> tuple[int, str]:
        """Set cancel_requested on a RUNNING/ALLOCATING job and note the workers to tell.

        (1, state) when set now, (2, state) when it was already set, (0, state) when the state
        was not `expected`."""
        keys = [self.keys.job(job_id), self.keys.job_events(job_id), self.keys.job_stopping(job_id)]
        args = [self.clock.now_ms(), expected, encode_payload(event), *workers]
        code, current = await self.scripts.request_cancel(keys=keys, args=args)
        if int(code) == 1:
            count_events(KIND_OF[type(event)])
        return int(code), current.decode()

    async def append(self, job_id: str, report: Report) -> tuple[AppendStatus, int]:
        """Append events (and progress/metrics) atomically; (status, last sequence)."""
        lease = report.lease
        metric_pairs = [part for pair in (report.metrics or {}).items() for part in (pair[0], repr(pair[1]))]
        field_pairs = [part for pair in (report.job_fields or {}).items() for part in pair]
        keys = [self.keys.job(job_id), self.keys.job_events(job_id),
                self.keys.job_request(job_id, report.request_id or "none"),
                self.keys.lease(lease.lease_id if lease else "none"), self.keys.job_metrics(job_id)]
        args = [self.clock.now_ms(), self.request_id_ttl_s, int(bool(report.request_id)), job_id,
                lease.fencing_token if lease else 0, int(lease is not None), len(field_pairs) // 2,
                len(metric_pairs) // 2, *field_pairs, *metric_pairs, *map(encode_payload, report.payloads)]
        status, sequence = await self.scripts.append_events(keys=keys, args=args)
        appended = AppendStatus(status.decode())
        if appended is AppendStatus.OK:
            for payload in report.payloads:
                count_events(KIND_OF[type(payload)])
        return appended, int(sequence or 0)

    async def set_status_messages(self, messages: Mapping[str, str]) -> None:
        """Why each queued job waits, in one round trip (only jobs still QUEUED are touched)."""
        await self._run_pipelined([self._note_waiting_call(messages)])

    def _note_waiting_call(self, messages: Mapping[str, str]) -> tuple[AsyncScript, list[str], list[str]]:
        return self.scripts.note_waiting, [self.keys.job(job_id) for job_id in messages], list(messages.values())

    async def queued_ids(self, limit: int) -> list[str]:
        """QUEUED job ids, highest priority first, FIFO within a priority."""
        return [i.decode() for i in await self.client.zrange(self.keys.job_queue(), 0, limit - 1)]

    async def index_page(self, tenant_id: str, *, before_order: int | None,
                         count: int) -> list[tuple[str, int]]:
        """(job_id, order) newest first, strictly older than `before_order` when given."""
        top = f"({before_order}" if before_order is not None else "+inf"
        rows = await self.client.zrevrangebyscore(self.keys.tenant_job_index(tenant_id), top, "-inf",
                                                  start=0, num=count, withscores=True)
        return [(job_id.decode(), int(score)) for job_id, score in rows]

    async def stop_told(self, job_id: str, worker_id: str) -> int:
        """Note that `worker_id` was told to stop `job_id`; how many workers remain to be told."""
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.srem(self.keys.job_stopping(job_id), worker_id)
            pipe.scard(self.keys.job_stopping(job_id))
            _, remaining = await pipe.execute()
        return int(remaining)


def _count_state_changes(*states: JobState) -> None:
    """Each state entered, and its StateChanged event."""
    for state in states:
        count_state_change(state.value)
        count_events(KIND_OF[StateChanged])


def _running(job: Job, start: Start, result: StartResult, *, now: int) -> Job:
    """`job` (QUEUED, as SUBMIT stored it) as the START that succeeded left it."""
    parts = [assignment_prefix(draft, address) + token + "}" for draft, address, token
             in zip(start.drafts, start.addresses, result.fencing_tokens, strict=True)]
    return dataclasses.replace(job, state=JobState.RUNNING, update_time_ms=now, start_time_ms=now,
                               attempt=job.attempt + 1, status_message="", queue_position=0,
                               assignments=decode_assignments(job.job_id, "[" + ",".join(parts) + "]"),
                               last_event_sequence=int(result.detail), job_token_nonce=start.job_token.nonce)
