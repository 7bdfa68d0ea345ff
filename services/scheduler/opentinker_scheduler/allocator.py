"""The allocator loop: expire lost leases, forget long-dead workers, bind queued jobs to workers.

Queued jobs are taken in the queue's order: aged priority (see lua.py), FIFO within a priority.
A job that does not fit now is skipped (a smaller job behind it may start: backfilling) and its
`status_message` says what it waits for; once a job has waited `starvation_ms` without fitting,
backfilling stops behind it so a stream of small jobs cannot starve it (only if the alive workers
could run it once free: a job none of them can ever run must not stop the queue). A job starts with one
Lua script (START: every lease plus QUEUED -> ALLOCATING -> RUNNING, within the tenant's quota,
or nothing). A pass reads everything it needs in one round trip (READ_PASS), plans every job that
fits against that view, then sends the START of every planned job in one pipelined round trip:
two round trips for a pass that starts jobs, whatever their number (and the status messages of the
jobs that wait ride along). A START that finds the world changed since the read (a slot taken, a
worker gone, the quota used) changes nothing, and another pass follows at once. A job this replica
queued itself is first tried on the view the last full pass left (pass_cache): its START alone,
one round trip; anything doubtful goes to a full pass.

The loop wakes when a job is queued or devices are freed (a Redis pub/sub message any scheduler
replica sends; a job submitted to this replica wakes it directly, and the message it sent itself
is then ignored), and at least every allocator interval. Housekeeping (expired leases, dead
workers) runs after the pass, at most once per interval, so it never delays a start. Only the
scheduler holding the allocator lock in Redis allocates, so replicas never race each other;
another takes over when it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis.asyncio
import structlog

from opentinker_runtime.core.cancellation import raise_if_cancelled
from opentinker_runtime.core.redis_store import REDIS_DOWN_ERRORS
from opentinker_scheduler.config import SchedulerConfig
from opentinker_scheduler.job_store import JobStore, Start, StartResult
from opentinker_scheduler.job_tokens import JobTokenIssuer
from opentinker_scheduler.leases import LeaseDraft, LeaseTable
from opentinker_scheduler.lifecycle import Lifecycle
from opentinker_scheduler.model import JobState, Quota, QueuedJob, Usage, Worker
from opentinker_scheduler.pass_cache import PassCache, cache_of
from opentinker_scheduler.placement import Placement, job_requests, place, worker_slots
from opentinker_scheduler.queue_view import PassView, QueueReader
from opentinker_scheduler.workers import WorkerRegistry

log = structlog.get_logger(__name__)

START_BATCH = 64
"""STARTs sent in one pipelined round trip."""


@dataclass(kw_only=True)
class Allocator:
    config: SchedulerConfig
    store: JobStore
    leases: LeaseTable
    workers: WorkerRegistry
    lifecycle: Lifecycle
    reader: QueueReader
    tokens: JobTokenIssuer
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    _last_housekeeping_ms: int = 0
    _fresh: list[QueuedJob] = field(default_factory=list)
    """Jobs this replica queued since the last pass (`queued`)."""
    _woken_remotely: bool = False
    """A wake-up message came from another replica or a freed device: the next pass is a full one."""
    _cache: PassCache | None = None
    _admitting: dict[str, Sequence[Placement]] = field(default_factory=dict)
    """The plan of each job whose START at submit is in flight, by job id."""
    _admitted_during_read: list[Sequence[Placement]] | None = None
    """The plans of the jobs planned at submit while a full pass's read is in flight."""
    on_workers: Callable[[Sequence[Worker], int], None] | None = None
    """Told the alive workers a pass read, and when (SubmitJob's EnvHost snapshot)."""

    async def run_forever(self, subscriber: redis.asyncio.Redis | None = None) -> None:
        """Pass after pass until cancelled; Redis outages are logged and retried.

        `subscriber` (a client without socket timeout) receives the wake-up messages."""
        listener = asyncio.create_task(self._listen(subscriber)) if subscriber is not None else None
        try:
            while True:
                try:
                    await self.tick(housekeeping=self._housekeeping_due())
                except REDIS_DOWN_ERRORS as error:
                    log.warning("allocator_redis_unavailable", error=str(error))
                await self._wait_for_wake_up()
                raise_if_cancelled()
                self.wake.clear()
        finally:
            if listener is not None:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)

    async def _wait_for_wake_up(self) -> None:
        """Until `wake` is set or the interval passed. Awaited in this task itself (no task per
        wait, as wait_for would make): a wake-up resumes the loop one event-loop turn sooner."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.config.allocator_interval_ms / 1000):
                await self.wake.wait()

    async def _listen(self, subscriber: redis.asyncio.Redis) -> None:
        """Set `wake` on every message of the wake channel; resubscribe after Redis outages.

        The subscription lives on a connection pool of its own (built from `subscriber`'s
        settings), read in bounded polls: cancelling it at shutdown can never leave a connection
        that the service's own clients would wait on while they close."""
        while True:
            pool = subscriber.connection_pool
            client = redis.asyncio.Redis(connection_pool=type(pool)(connection_class=pool.connection_class,
                                                                    **pool.connection_kwargs))
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            own = self.store.origin.encode()
            try:
                await pubsub.subscribe(self.store.keys.allocator_wake())
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None and message["data"] != own:  # own submissions woke it already
                        self._woken_remotely = True
                        self.wake.set()
            except Exception as error:  # noqa: BLE001 - never die silently: passes still run on the interval
                log.warning("allocator_wakeups_unavailable", error=f"{type(error).__name__}: {error}")
                await asyncio.sleep(self.config.allocator_interval_ms / 1000)
            finally:
                with contextlib.suppress(Exception):  # Redis may be going away too: do not wait on it
                    await asyncio.wait_for(client.aclose(), 1.0)

    def _housekeeping_due(self) -> bool:
        return self.store.clock.now_ms() - self._last_housekeeping_ms >= self.config.allocator_interval_ms

    @property
    def lock_ttl_ms(self) -> int:
        return self.config.allocator_interval_ms * 4 + 1000

    def queued(self, job: QueuedJob) -> None:
        """This replica queued `job`: wake the loop, and let the next pass try it first on the
        last full pass's view (one round trip: see pass_cache)."""
        if len(self._fresh) < self.config.queue_scan_limit:
            self._fresh.append(job)
        else:  # the queue holds it anyway: a full pass reads it
            self._woken_remotely = True
        self.wake.set()

    def draft_admission(self, job: QueuedJob) -> Start | None:
        """The START of `job`, which SubmitJob is about to queue, planned on the last full pass's
        view so that it goes with the job's SUBMIT in one round trip (start at submit); None
        (the job waits for a pass) unless that view is fresh, no job of this replica waits for
        a pass (none is overtaken), no other replica's message is pending, and the job fits.
        The plan takes its slots from the view at once, so concurrent submissions never plan
        the same slot; START checks everything again in Redis."""
        cache = self._cache
        if (not self.config.start_at_submit or cache is None or self._fresh or self._woken_remotely
                or not cache.usable(self.store.clock.now_ms(), self.config.allocator_interval_ms)):
            return None
        plans = cache.plan([job])
        if plans is None:
            return None
        self._admitting[job.job_id] = plans[0]
        if self._admitted_during_read is not None:
            self._admitted_during_read.append(plans[0])
        return self._draft_start(job, plans[0])

    def admission_done(self, start: Start, result: StartResult) -> None:
        """What the START of `draft_admission` did. Refused (a slot taken, a worker gone, the
        quota used, or no job created): the view was wrong, so the next pass is a full one."""
        self._admitting.pop(start.job.job_id, None)
        if result.ok:
            log.info("job_started", job_id=start.job.job_id, where=start.where, at="submit")
            return
        log.info("job_not_started_at_submit", job_id=start.job.job_id, status=result.status, detail=result.detail)
        self._cache = None

    def devices_freed(self) -> None:
        """A job ended here and freed its devices: a pass now reads them into the view that
        submissions start on (no wake-up message says so while the queue is empty)."""
        if self.config.start_at_submit:
            self.wake.set()

    async def tick(self, *, housekeeping: bool = True) -> None:
        """One pass: start what fits (then housekeeping, and another pass if it freed anything).
        Nothing unless this replica holds the allocator lock. Without housekeeping due and with
        only this replica's own submissions to start, first the one-round-trip pass."""
        fresh, self._fresh = self._fresh, []
        remote, self._woken_remotely = self._woken_remotely, False
        if fresh and not (housekeeping or remote) and await self._fast_pass(fresh):
            return
        if not await self._pass():
            return
        if housekeeping:
            self._last_housekeeping_ms = self.store.clock.now_ms()
            if await self.expire_leases() + await self.forget_dead_workers():
                await self._pass()

    async def _fast_pass(self, fresh: Sequence[QueuedJob]) -> bool:
        """Start `fresh` (in submission order) on the cached view, all in one round trip; False
        (and the cache dropped) when the cache is missing, too old, or any job does not fit or
        is refused: a full pass must follow."""
        cache, self._cache = self._cache, None
        if cache is None or not cache.usable(self.store.clock.now_ms(), self.config.allocator_interval_ms):
            return False
        plans = cache.plan(fresh)
        if plans is None:
            return False
        starts = [self._draft_start(job, plan) for job, plan in zip(fresh, plans, strict=True)]
        if not all(result.ok for result in await self._start_all(starts, {})):
            return False
        self._cache = cache
        return True

    async def _pass(self) -> bool:
        """Read and allocate; False when another replica holds the allocator lock. With start at
        submit on, a pass that finds the queue empty still reads the workers, so the cache knows
        the devices freed since."""
        read_ms = self.store.clock.now_ms()
        self._admitted_during_read = admitted = list(self._admitting.values())  # the view may not show them
        try:
            view = await self.reader.read(owner=self.owner, lock_ttl_ms=self.lock_ttl_ms,
                                          scan_limit=self.config.queue_scan_limit,
                                          workers_wanted=self.config.start_at_submit)
        finally:
            self._admitted_during_read = None
        for plan in admitted:
            take_slots(view, plan)
        if view.alive and self.on_workers is not None:
            self.on_workers(view.alive, read_ms)
        if view.holds_lock and view.queued:
            self._cache = None
            usage = await self.allocate(view)
            if usage is not None:
                self._cache = cache_of(view, read_ms=read_ms, usage=usage)
        elif not view.holds_lock:
            self._cache = None
        elif view.alive:
            self._cache = cache_of(view, read_ms=read_ms, usage=view.usage)
        return view.holds_lock

    async def expire_leases(self) -> int:
        """Re-queue or end the jobs of leases whose TTL passed (their worker stopped
        heartbeating), then release those leases. How many were released.

        The job is handled first: a scheduler killed in between leaves the expired lease in
        place, and the next pass (on any replica) handles it again."""
        released = 0
        now = self.store.clock.now_ms()
        for lease_id in await self.leases.expired_ids():
            lease = await self.leases.get(lease_id)
            if lease is None or lease.expire_time_ms > now:
                continue
            log.warning("lease_expired", lease_id=lease_id, job_id=lease.job_id, worker_id=lease.worker_id)
            await self.lifecycle.lease_lost(lease, reason="no heartbeat within the worker TTL")
            await self.leases.release(lease_id, only_if_expired=True)
            released += 1
        for job_id, assignment in await self.store.assignments_without_lease():
            await self.lifecycle.lost_without_lease(job_id, assignment)
            released += 1
        return released

    async def forget_dead_workers(self) -> int:
        cutoff = self.store.clock.now_ms() - self.config.dead_worker_retention_ms
        dead = await self.workers.dead_before(cutoff)
        for worker_id in dead:
            await self.workers.remove(worker_id)
            log.info("worker_forgotten", worker_id=worker_id)
        return len(dead)

    async def allocate(self, view: PassView) -> dict[str, Usage] | None:
        """Start every queued job that fits, in queue order; note why the others wait. The
        tenants' usage after the pass when every job it saw started (else None)."""
        waiting: dict[str, str] = {}
        starving: QueuedJob | None = None
        usage = dict(view.usage)
        starts: list[Start] = []
        for job in view.queued:
            if job.state is not JobState.QUEUED:
                continue
            reason = quota_reason(job, view.quotas.get(job.tenant_id, Quota()), usage.get(job.tenant_id, Usage()))
            if reason is None and starving is not None:
                reason = waiting_behind(job, starving, self._waited_s(starving))
            plan = place(job_requests(job), view.alive, view.free) if reason is None else reason
            if isinstance(plan, str):
                waiting[job.job_id] = plan
                if reason is None and starving is None and self._starves(job, view):
                    starving = job
                continue
            starts.append(self._draft_start(job, plan))
            take_slots(view, plan)
            usage[job.tenant_id] = add_running(usage.get(job.tenant_id, Usage()), job.device_count)
        refused: dict[str, str] = {}
        results = await self._start_all(starts, changed_messages(view.queued, waiting))
        for start, result in zip(starts, results, strict=True):
            if result.status.startswith("quota"):
                refused[start.job.job_id] = (f"waiting for the tenant's quota ({result.status}: "
                                             f"{result.detail} in use)")
            if not result.ok and result.status != "state":
                self._woken_remotely = True  # the view was stale: the next pass (at once, a full one)
                self.wake.set()              # sees the truth
        if refused:
            await self.store.set_status_messages(refused)
        all_started = not waiting and all(result.ok for result in results)
        return usage if all_started else None

    def _starves(self, job: QueuedJob, view: PassView) -> bool:
        """Waited past starvation_ms and would fit the alive workers once they are free. A job
        no alive worker can ever run (64 devices on one worker) must not stop backfilling: it
        would hold every tenant's jobs back for good."""
        if self._waited_s(job) * 1000 < self.config.starvation_ms:
            return False
        idle = {w.worker_id: worker_slots(w, self.config.coordinator_capacity, self.config.gateway_capacity)
                for w in view.alive}
        return not isinstance(place(job_requests(job), view.alive, idle), str)

    def _waited_s(self, job: QueuedJob) -> int:
        return max(0, self.store.clock.now_ms() - job.create_time_ms) // 1000

    def _draft_start(self, job: QueuedJob, plan: Sequence[Placement]) -> Start:
        drafts = [LeaseDraft(worker_id=p.worker.worker_id, role=p.request.role, slots=p.slots,
                             device_ids=p.device_ids) for p in plan]
        where = ", ".join(f"{p.request.role.lower()} on {p.worker.worker_id}" for p in plan)
        return Start(job=job, drafts=drafts, addresses=[p.worker.address for p in plan], where=where,
                     job_token=self.tokens.draft(job.job_id))

    async def _start_all(self, starts: Sequence[Start], messages: dict[str, str]) -> list[StartResult]:
        """START every planned job, START_BATCH per round trip (a long pass yields in between);
        the first round trip also notes why the other jobs wait (`messages`)."""
        if not starts and messages:
            await self.store.set_status_messages(messages)
        results: list[StartResult] = []
        for first in range(0, len(starts), START_BATCH):
            batch = starts[first:first + START_BATCH]
            results += await self.store.start_many(batch, ttl_ms=self.config.worker_ttl_ms,
                                                   status_messages=messages if first == 0 else None)
        for start, result in zip(starts, results, strict=True):
            if result.ok:
                log.info("job_started", job_id=start.job.job_id, where=start.where)
            else:
                log.info("job_not_started", job_id=start.job.job_id, status=result.status, detail=result.detail)
        return results


def changed_messages(queued: Sequence[QueuedJob], waiting: dict[str, str]) -> dict[str, str]:
    """The new status messages among `waiting`: only those that differ from the stored ones."""
    return {job.job_id: waiting[job.job_id] for job in queued
            if job.job_id in waiting and waiting[job.job_id] != job.status_message}


def quota_reason(job: QueuedJob, quota: Quota, usage: Usage) -> str | None:
    """Why the tenant's quota keeps `job` waiting now, or None."""
    if quota.max_concurrent_jobs and usage.running_jobs >= quota.max_concurrent_jobs:
        return (f"waiting for the tenant's quota: {usage.running_jobs} jobs running, "
                f"max_concurrent_jobs is {quota.max_concurrent_jobs}")
    if quota.max_devices and usage.devices + job.device_count > quota.max_devices:
        return (f"waiting for the tenant's quota: needs {job.device_count} devices, "
                f"{usage.devices} of max_devices {quota.max_devices} in use")
    return None


def waiting_behind(job: QueuedJob, starving: QueuedJob, waited_s: int) -> str:
    """Why `job` may not backfill; another tenant's job is not named (tenants never see each
    other's job ids)."""
    blocker = f"job {starving.job_id}" if starving.tenant_id == job.tenant_id else "another tenant's job"
    return f"waiting behind {blocker}, which has waited {waited_s} s: no backfilling past it until it starts"


def add_running(usage: Usage, devices: int) -> Usage:
    return Usage(devices=usage.devices + devices, running_jobs=usage.running_jobs + 1,
                 queued_jobs=max(0, usage.queued_jobs - 1))


def take_slots(view: PassView, plan: Sequence[Placement]) -> None:
    for placement in plan:
        taken = set(placement.slots)
        worker_id = placement.worker.worker_id
        view.free[worker_id] = [s for s in view.free[worker_id] if s not in taken]
