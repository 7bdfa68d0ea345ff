"""What the last full allocator pass saw, kept to start a job this replica just queued in ONE
round trip (its START) instead of two (READ_PASS, then START).

The cache is only a plan's basis, never the truth: START checks every slot, the worker and the
tenant's quota in Redis, all or nothing, so a stale cache can only make START refuse (then a full
pass follows at once), never start a job twice or on a taken slot. It is used only while it is
younger than the allocator interval (full passes keep coming at least that often: they hold the
allocator lock and run housekeeping) and only when the last full pass left no job waiting: a job
already in the queue (an older one, a higher priority, one the starvation guard protects) is
never overtaken by a fresh one. Devices freed since the read are unknown to it: a fresh job
that does not fit the cache goes to a full pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from opentinker_scheduler.model import Quota, QueuedJob, Usage
from opentinker_scheduler.placement import Placement, job_requests, place
from opentinker_scheduler.queue_view import PassView


@dataclass(kw_only=True)
class PassCache:
    view: PassView
    """Free slots and usage as the last full pass left them (its own starts taken)."""
    read_ms: int
    """When that pass read Redis."""

    def usable(self, now_ms: int, max_age_ms: int) -> bool:
        return now_ms - self.read_ms < max_age_ms

    def plan(self, jobs: Sequence[QueuedJob]) -> list[list[Placement]] | None:
        """A placement for every job in order, each taking its slots from the cache; None when
        one does not fit or its tenant's quota (as last read) would refuse it."""
        free = {worker_id: list(slots) for worker_id, slots in self.view.free.items()}
        usage = dict(self.view.usage)
        plans = []
        for job in jobs:
            quota = self.view.quotas.get(job.tenant_id, Quota())  # not read yet: START enforces it
            if _over_quota(quota, usage.get(job.tenant_id, Usage()), job.device_count):
                return None
            plan = place(job_requests(job), self.view.alive, free)
            if isinstance(plan, str):
                return None
            for placement in plan:
                taken = set(placement.slots)
                free[placement.worker.worker_id] = [s for s in free[placement.worker.worker_id] if s not in taken]
            usage[job.tenant_id] = _running_one_more(usage.get(job.tenant_id, Usage()), job.device_count)
            plans.append(plan)
        self.view.free.update(free)
        self.view.usage.update(usage)
        return plans


def cache_of(view: PassView, *, read_ms: int, usage: dict[str, Usage]) -> PassCache:
    """The cache of a full pass that started every job it saw (its free slots already taken)."""
    return PassCache(view=dataclasses.replace(view, queued=[], usage=dict(usage)), read_ms=read_ms)


def _over_quota(quota: Quota, usage: Usage, devices: int) -> bool:
    return bool((quota.max_concurrent_jobs and usage.running_jobs >= quota.max_concurrent_jobs)
                or (quota.max_devices and usage.devices + devices > quota.max_devices))


def _running_one_more(usage: Usage, devices: int) -> Usage:
    return Usage(devices=usage.devices + devices, running_jobs=usage.running_jobs + 1,
                 queued_jobs=max(0, usage.queued_jobs - 1))
