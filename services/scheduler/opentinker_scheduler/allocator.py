"""The allocator loop: expire lost leases, forget long-dead workers, bind queued jobs to workers.

Queued jobs are taken by priority, then FIFO. A job that does not fit now is skipped (a smaller
job behind it may start: backfilling) and its `status_message` says what it waits for. A job
moves QUEUED -> ALLOCATING -> RUNNING with one lease per resource request plus one on an alive
coordinator. Only the scheduler holding the allocator lock in Redis allocates, so several
scheduler replicas never race each other.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import structlog

from opentinker.core.redis_store import REDIS_DOWN_ERRORS
from opentinker_scheduler.codec import encode_assignments
from opentinker_scheduler.config import SchedulerConfig
from opentinker_scheduler.job_store import JobStore
from opentinker_scheduler.leases import LeaseTable, LeaseUnavailable
from opentinker_scheduler.lifecycle import Lifecycle
from opentinker_scheduler.model import Assignment, Job, JobState, Lease, LeaseContext, Worker, WorkerState
from opentinker_scheduler.placement import COORDINATOR_REQUEST, Placement, place, worker_slots
from opentinker_scheduler.workers import WorkerRegistry

log = structlog.get_logger(__name__)


@dataclass(kw_only=True)
class Allocator:
    config: SchedulerConfig
    store: JobStore
    leases: LeaseTable
    workers: WorkerRegistry
    lifecycle: Lifecycle
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)

    async def run_forever(self) -> None:
        """Tick every allocator interval; Redis outages are logged and retried."""
        while True:
            try:
                await self.tick()
            except REDIS_DOWN_ERRORS as error:
                log.warning("allocator_redis_unavailable", error=str(error))
            await asyncio.sleep(self.config.allocator_interval_ms / 1000)

    async def tick(self) -> None:
        if not await self._hold_lock():
            return
        await self.expire_leases()
        await self.forget_dead_workers()
        await self.allocate()

    @property
    def lock_ttl_ms(self) -> int:
        return self.config.allocator_interval_ms * 4 + 1000

    async def _hold_lock(self) -> bool:
        client, key, ttl_ms = self.store.client, self.store.keys.allocator_lock(), self.lock_ttl_ms
        if await client.set(key, self.owner, nx=True, px=ttl_ms):
            return True
        if await client.get(key) == self.owner.encode():
            await client.pexpire(key, ttl_ms)
            return True
        return False

    async def expire_leases(self) -> None:
        """Release leases whose TTL passed (their worker stopped heartbeating); end their jobs."""
        for lease_id in await self.leases.expired_ids():
            lease = await self.leases.release(lease_id, only_if_expired=True)
            if lease is not None:
                log.warning("lease_expired", lease_id=lease_id, job_id=lease.job_id,
                            worker_id=lease.worker_id)
                await self.lifecycle.lease_lost(lease, reason="no heartbeat within the worker TTL")

    async def forget_dead_workers(self) -> None:
        cutoff = self.store.clock.now_ms() - self.config.dead_worker_retention_ms
        for worker_id in await self.workers.dead_before(cutoff):
            await self.workers.remove(worker_id)
            log.info("worker_forgotten", worker_id=worker_id)

    async def allocate(self) -> None:
        """One pass over the queue."""
        alive = [w for w in await self.workers.all() if w.state is WorkerState.ALIVE]
        free = {w.worker_id: await self._free_slots(w) for w in alive}
        for job_id in await self.store.queued_ids(self.config.queue_scan_limit):
            job = await self._queued(job_id)
            if job is None:
                continue
            plan = place([*job.resources, COORDINATOR_REQUEST], alive, free)
            if isinstance(plan, str):
                if plan != job.status_message:
                    await self.store.set_status_message(job_id, plan)
                continue
            if await self.start(job, plan):
                for placement in plan:
                    taken = set(placement.slots)
                    free[placement.worker.worker_id] = [s for s in free[placement.worker.worker_id]
                                                        if s not in taken]

    async def _queued(self, job_id: str) -> Job | None:
        """The job if it is QUEUED; an ALLOCATING one whose allocation was interrupted (its
        scheduler died mid-way) is re-queued first."""
        job = await self.store.get(job_id)
        if job is None or job.state is not JobState.ALLOCATING:
            return job if job is not None and job.state is JobState.QUEUED else None
        if self.store.clock.now_ms() - job.update_time_ms <= self.lock_ttl_ms:
            return None
        if job.cancel_requested:
            await self.lifecycle.end(job_id, expected=JobState.ALLOCATING, to=JobState.CANCELLED,
                                     reason="cancelled while devices were being leased")
            return None
        await self.lifecycle.release_all(job_id)
        moved = await self.store.transition(job_id, expected=JobState.ALLOCATING, to=JobState.QUEUED,
                                            reason="allocation was interrupted; queued again")
        return await self.store.get(job_id) if moved.ok else None

    async def _free_slots(self, worker: Worker) -> list[str]:
        slots = worker_slots(worker, self.config.coordinator_capacity)
        busy = await self.leases.busy_slots(worker.worker_id, slots)
        return [slot for slot in slots if slot not in busy]

    async def start(self, job: Job, plan: list[Placement]) -> bool:
        """QUEUED -> ALLOCATING -> RUNNING; back to QUEUED when a lease was taken meanwhile."""
        where = ", ".join(f"{p.request.role.lower()} on {p.worker.worker_id}" for p in plan)
        moved = await self.store.transition(job.job_id, expected=JobState.QUEUED,
                                            to=JobState.ALLOCATING, reason=f"leasing {where}")
        if not moved.ok:
            return False
        try:
            leases = await self._acquire_all(job, plan)
        except LeaseUnavailable as error:
            await self.store.transition(job.job_id, expected=JobState.ALLOCATING, to=JobState.QUEUED,
                                        reason=f"a device was taken meanwhile ({error}); retrying",
                                        fields={"status_message": "retrying allocation"})
            return False
        return await self._run(job, plan, leases, where)

    async def _acquire_all(self, job: Job, plan: list[Placement]) -> list[Lease]:
        leases: list[Lease] = []
        try:
            for p in plan:
                leases.append(await self.leases.acquire(
                    job_id=job.job_id, worker_id=p.worker.worker_id, role=p.request.role,
                    slots=p.slots, device_ids=p.device_ids, ttl_ms=self.config.worker_ttl_ms))
        except LeaseUnavailable:
            for lease in leases:
                await self.leases.release(lease.lease_id)
            raise
        return leases

    async def _run(self, job: Job, plan: list[Placement], leases: list[Lease], where: str) -> bool:
        assignments = tuple(assignment(p, lease) for p, lease in zip(plan, leases, strict=True))
        now = self.store.clock.now_ms()
        fields = {"assignments": encode_assignments(assignments), "start_time": now,
                  "attempt": job.attempt + 1, "status_message": ""}
        result = await self.store.transition(job.job_id, expected=JobState.ALLOCATING,
                                             to=JobState.RUNNING, reason=f"running: {where}",
                                             fields=fields, refuse_if_cancel_requested=True)
        if result.ok:
            log.info("job_started", job_id=job.job_id, where=where)
            return True
        for lease in leases:
            await self.leases.release(lease.lease_id)
        if result.current == "cancel_requested":
            await self.lifecycle.end(job.job_id, expected=JobState.ALLOCATING, to=JobState.CANCELLED,
                                     reason="cancelled while devices were being leased")
        return False


def assignment(placement: Placement, lease: Lease) -> Assignment:
    return Assignment(role=placement.request.role, worker_id=placement.worker.worker_id,
                      address=placement.worker.address, device_ids=placement.device_ids,
                      lease=LeaseContext(job_id=lease.job_id, lease_id=lease.lease_id,
                                         fencing_token=lease.fencing_token))
