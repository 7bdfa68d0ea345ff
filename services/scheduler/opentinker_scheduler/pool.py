"""Worker use cases: register, heartbeat (renew + learn assignments), deregister, list."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from opentinker_scheduler import envhosts
from opentinker_scheduler.codec import LEASED_JOB_FIELDS, decode_leased_job, encode_resident
from opentinker_scheduler.config import SchedulerConfig
from opentinker_scheduler.errors import InvalidArgument, NotFound
from opentinker_scheduler.job_store import JobStore
from opentinker_scheduler.job_tokens import JobTokenIssuer
from opentinker_scheduler.jobs import check_id
from opentinker_scheduler.leases import LeaseTable
from opentinker_scheduler.lifecycle import Lifecycle, holds
from opentinker_scheduler.model import (
    Assignment,
    Caller,
    JobState,
    LeasedJob,
    Page,
    ResidentModel,
    Role,
    Worker,
    WorkerRegistration,
    WorkerState,
)
from opentinker_scheduler.paging import decode_token, encode_token, page_size
from opentinker_scheduler.workers import WorkerRegistry


@dataclass(frozen=True, kw_only=True)
class HeartbeatResult:
    assignments: list[Assignment] = field(default_factory=list)
    stop_job_ids: list[str] = field(default_factory=list)
    job_tokens: dict[str, str] = field(default_factory=dict)
    """The running attempt's job token of each assigned job, by job id."""


@dataclass(frozen=True, kw_only=True)
class WorkerPool:
    config: SchedulerConfig
    registry: WorkerRegistry
    store: JobStore
    leases: LeaseTable
    lifecycle: Lifecycle
    tokens: JobTokenIssuer
    envhosts: envhosts.EnvHostDirectory

    async def register(self, registration: WorkerRegistration, caller: Caller) -> Worker:
        """Join (or re-join after a restart: the old registration's leases are lost). A tenant key
        registers only EnvHosts of its own (see `envhosts`)."""
        check_registration(registration)
        envhosts.check_tenant_registration(registration, caller)
        envhosts.check_claim(await self.registry.get(registration.worker_id), caller)
        await self.envhosts.check_room(registration, caller)
        await self._drop_leases(registration.worker_id, reason="the worker registered again (restarted)")
        owned = dataclasses.replace(registration, tenant_id=envhosts.owner_of(caller))
        worker = await self.registry.put(owned, ttl_ms=self.config.worker_ttl_ms)
        if worker.role is Role.ENVHOST:
            self.envhosts.snapshot.forget()  # its games count for the next SubmitJob here
        return worker

    async def _require_own(self, worker_id: str, caller: Caller) -> None:
        """A tenant acts only on the workers it registered (another's is NOT_FOUND, as an unknown one)."""
        check_id("worker_id", worker_id)
        if not caller.admin and not envhosts.owns(await self.registry.get(worker_id), caller):
            raise NotFound(f"worker {worker_id} is not registered or missed heartbeats past its TTL; register "
                           "again", reason="")

    async def heartbeat(self, worker_id: str, caller: Caller,
                        resident: tuple[ResidentModel, ...] = ()) -> HeartbeatResult:
        """Renew the worker and its leases; its assignments and the jobs it must stop (one
        script reads the leases' jobs in the same step). `resident`: the base models it holds
        now, kept for placement and ListWorkers (only a stack worker's: a tenant's EnvHost holds
        no model of ours, and may not steer placement).

        NOT_FOUND when the worker is unknown or was declared dead: it must register again."""
        await self._require_own(worker_id, caller)
        check_resident(resident)
        renewed = await self.leases.heartbeat_with_jobs(worker_id, ttl_ms=self.config.worker_ttl_ms,
                                                        job_fields=LEASED_JOB_FIELDS,
                                                        resident=encode_resident(resident if caller.admin else ()))
        if renewed is None:
            raise NotFound(f"worker {worker_id} is not registered or missed heartbeats past its "
                           "TTL; register again", reason="")
        result = HeartbeatResult()
        for lease_id, job_fields in renewed:
            await self._collect(worker_id, lease_id, decode_leased_job(job_fields), result)
        return result

    async def _collect(self, worker_id: str, lease_id: str, job: LeasedJob | None, result: HeartbeatResult) -> None:
        if job is None or job.state.terminal or not holds(job, lease_id):
            await self.leases.release(lease_id)  # the job ended or moved on without this lease
            return
        if job.cancel_requested:
            result.stop_job_ids.append(job.job_id)
            if await self.store.stop_told(job.job_id, worker_id) == 0:
                await self.lifecycle.end(job.job_id, expected=job.state, to=JobState.CANCELLED,
                                         reason="cancelled: every worker was told to stop")
            return
        if job.state is JobState.RUNNING:
            result.assignments.extend(a for a in job.assignments if a.lease.lease_id == lease_id)
            result.job_tokens[job.job_id] = self.tokens.token_of(job.job_id, job.state, job.job_token_nonce)

    async def deregister(self, worker_id: str, caller: Caller, *, drain: bool) -> Worker:
        """drain: DRAINING (no new jobs, current ones continue); else leave now, re-queueing its jobs."""
        await self._require_own(worker_id, caller)
        worker = await self.registry.get(worker_id)
        if worker is None:
            raise NotFound(f"worker {worker_id} not found", reason="")
        if drain:
            await self.registry.set_draining(worker_id)
            return await self.registry.get(worker_id) or worker
        await self.registry.remove(worker_id)  # first: its re-queued jobs must not land on it again
        await self._drop_leases(worker_id, reason="the worker deregistered")
        return dataclasses.replace(worker, state=WorkerState.DEAD, leases=())

    async def _drop_leases(self, worker_id: str, *, reason: str) -> None:
        """Handle each lease's job first, then release the lease: a scheduler killed in between
        leaves the lease for the heartbeat or the expiry sweep to find."""
        for lease in await self.leases.of_worker(worker_id):
            await self.lifecycle.lease_lost(lease, reason=reason)
            await self.leases.release(lease.lease_id)

    async def list(self, caller: Caller, *, size: int, token: str, role: Role) -> Page[Worker]:
        """Workers by id, optionally of one role, with their leases (a tenant key: its own EnvHosts)."""
        limit = page_size(size)
        after = decode_token("workers", token) or ""
        workers = [w for w in await self.registry.all()
                   if w.worker_id > after and role in (Role.UNSPECIFIED, w.role) and envhosts.owns(w, caller)]
        page = [dataclasses.replace(w, leases=tuple(await self.leases.of_worker(w.worker_id)))
                for w in workers[:limit]]
        next_token = encode_token("workers", page[-1].worker_id) if len(workers) > limit else ""
        return Page(items=page, next_page_token=next_token)


def check_registration(registration: WorkerRegistration) -> None:
    check_id("worker_id", registration.worker_id)
    envhosts.check_name(registration)
    if registration.role is Role.UNSPECIFIED:
        raise InvalidArgument("role", "must be set (ROLE_TRAINER, ROLE_ROLLOUT, ROLE_ENVHOST, "
                              "ROLE_COORDINATOR or ROLE_GATEWAY)")
    if not registration.address:
        raise InvalidArgument("address", "must be the host:port other services reach the worker at")
    check_labels(registration.labels)
    if registration.role is Role.GATEWAY and registration.devices:
        raise InvalidArgument("devices", "a gateway (ROLE_GATEWAY) offers no devices: it drives SESSION jobs "
                              "on capacity slots, as a Coordinator drives the others")
    seen: set[str] = set()
    for index, device in enumerate(registration.devices):
        check_id(f"devices[{index}].device_id", device.device_id)
        if device.device_id in seen or device.device_id.startswith("slot:"):
            raise InvalidArgument(f"devices[{index}].device_id",
                                  f"{device.device_id!r} is repeated or reserved (slot:N)")
        seen.add(device.device_id)


MAX_WORKER_LABELS = 32
MAX_WORKER_LABEL_KEY = 128
MAX_WORKER_LABEL_VALUE = 16_384
"""A worker's labels are stored with it and shown by ListWorkers (e.g. an EnvHost's games:
opentinker_runtime.core.envhost_catalog); a tenant's own EnvHost sets them too, so they are bounded."""


def check_labels(labels: dict[str, str]) -> None:
    if len(labels) > MAX_WORKER_LABELS:
        raise InvalidArgument("labels", f"has {len(labels)} entries, at most {MAX_WORKER_LABELS}")
    for key, value in labels.items():
        if not key or len(key) > MAX_WORKER_LABEL_KEY:
            raise InvalidArgument("labels", f"keys must be 1-{MAX_WORKER_LABEL_KEY} characters")
        if len(value) > MAX_WORKER_LABEL_VALUE:
            raise InvalidArgument(f"labels[{key!r}]", f"values must be at most {MAX_WORKER_LABEL_VALUE} characters")


MAX_RESIDENT_MODELS = 64
MAX_RESIDENT_JOBS = 1024
MAX_MODEL_KEY_CHARS = 1024


def check_resident(resident: tuple[ResidentModel, ...]) -> None:
    """A heartbeat's resident models within bounds (they are stored and sent in every listing)."""
    if len(resident) > MAX_RESIDENT_MODELS:
        raise InvalidArgument("resident_models", f"{len(resident)} models; at most {MAX_RESIDENT_MODELS}")
    for index, model in enumerate(resident):
        where = f"resident_models[{index}]"
        if not model.model_key or len(model.model_key) > MAX_MODEL_KEY_CHARS:
            raise InvalidArgument(f"{where}.model_key", f"must be 1 to {MAX_MODEL_KEY_CHARS} characters")
        if not model.device_id or len(model.device_id) > 128:
            raise InvalidArgument(f"{where}.device_id", "must be 1 to 128 characters")
        if len(model.job_ids) > MAX_RESIDENT_JOBS:
            raise InvalidArgument(f"{where}.job_ids", f"{len(model.job_ids)} ids; at most {MAX_RESIDENT_JOBS}")
        for job_id in model.job_ids:
            check_id(f"{where}.job_ids", job_id)
