"""The worker side of the scheduler protocol: register, heartbeat, learn assignments and stops.

Every worker process (Trainer, Rollout, Coordinator, EnvHost) runs one `WorkerAgent`:

    agent = WorkerAgent(scheduler_address="127.0.0.1:50051", role="trainer", worker_id="host-trainer-50052",
                        address="127.0.0.1:50052", devices=discover_devices(cpu_slots=1),
                        on_assignment=open_session, on_stop=close_session)
    await agent.start()   # returns at once; registration retries in the background
    ...
    await agent.stop()    # deregisters (best effort) and ends the background task

The agent registers (retrying with backoff, a warning per failed try, while the scheduler is
unreachable), then heartbeats at the interval the scheduler returns. `on_assignment(assignment)`
runs once per new lease (by lease_id); `on_stop(job_id)` runs when the scheduler lists the job in
`stop_job_ids` (cancel) or when the worker's assignment for it disappears (job ended, lease lost).
A NOT_FOUND heartbeat (the scheduler declared this worker dead) stops every job it served and
registers again. Callbacks run as background tasks, so a slow model load never delays a
heartbeat; callbacks of one job run one after another, in the order they were triggered. A
callback may see a stop for a job whose assignment it never saw (cancelled before the first
heartbeat) and should ignore unknown jobs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

import grpc
import structlog

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_api.scheduler.v1 import worker_pb2
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.workers.devices import Device, ResidentModel
from opentinker_runtime.core.redis_store import Backoff

log = structlog.get_logger(__name__)

REPORT_CHECK_SECONDS = 0.25
"""How often a worker with a resident-model report checks it for a change between heartbeats."""
AssignmentCallback = Callable[[job_pb2.Assignment], Awaitable[None]]
StopCallback = Callable[[str], Awaitable[None]]
ResidentModels = Callable[[], Sequence[ResidentModel]]
DEFAULT_BACKOFF = Backoff(initial_seconds=0.2, factor=2.0, max_seconds=5.0)
# gRPC's default reconnect backoff grows to ~10 s after a few failures: a scheduler restarted
# within the worker TTL would then see the heartbeat too late and the worker's leases expire.
DEVICE_KINDS = {"cpu": resources_pb2.DEVICE_KIND_CPU, "cuda": resources_pb2.DEVICE_KIND_CUDA}


def role_value(role: int | str) -> int:
    """A common.v1.Role value from the enum number or a name ("trainer", "ROLE_TRAINER")."""
    if isinstance(role, int):
        return role
    name = role.upper()
    return int(resources_pb2.Role.Value(name if name.startswith("ROLE_") else f"ROLE_{name}"))


def device_message(device: Device) -> resources_pb2.Device:
    return resources_pb2.Device(device_id=device.device_id, memory_bytes=device.memory_bytes,
                                kind=DEVICE_KINDS.get(device.kind, resources_pb2.DEVICE_KIND_UNSPECIFIED),
                                name=device.name, shares=device.shares)


class WorkerAgent:
    """Registers one worker with the scheduler and keeps it alive; see the module docstring."""

    def __init__(self, *, scheduler_address: str, role: int | str, worker_id: str, address: str,
                 devices: Sequence[Device] = (), on_assignment: AssignmentCallback,
                 on_stop: StopCallback, labels: Mapping[str, str] | None = None, version: str = "",
                 backoff: Backoff = DEFAULT_BACKOFF, rpc_timeout_seconds: float = 5.0,
                 api_key: str = "", name: str = "", resident_models: ResidentModels | None = None) -> None:
        """`resident_models`: what base models the worker holds now, sent with each heartbeat, and
        at once (within `REPORT_CHECK_SECONDS`) when it changes, so placement by base and the
        workers view see a base from the moment it is loaded, not a heartbeat later."""
        self.scheduler_address = scheduler_address
        self.resident_models = resident_models
        self.worker_id = worker_id
        self.registration = pb.RegisterWorkerRequest(
            worker_id=worker_id, role=role_value(role), address=address,
            devices=[device_message(d) for d in devices], labels=dict(labels or {}), version=version, name=name)
        self.on_assignment = on_assignment
        self.on_stop = on_stop
        self.backoff = backoff
        self.rpc_timeout = rpc_timeout_seconds
        self._api_key = api_key
        self.heartbeat_interval = 1.0
        self.lease_ttl: float | None = None
        """The Scheduler's worker TTL (from registration): leases unrenewed for longer are gone."""
        self._renewed_at = 0.0
        self.registered = asyncio.Event()
        self._assignments: dict[str, job_pb2.Assignment] = {}
        self._stopped_jobs: set[str] = set()
        self._job_tasks: dict[str, asyncio.Task[None]] = {}
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.SchedulerServiceStub | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def assignments(self) -> dict[str, job_pb2.Assignment]:
        """The assignments currently served, by lease_id."""
        return dict(self._assignments)

    async def start(self) -> None:
        """Start the background register + heartbeat task (returns at once)."""
        if self._task is not None:
            raise RuntimeError("WorkerAgent.start() was already called")
        self._channel = authenticated_channel(self.scheduler_address, self._api_key)
        self._stub = pb_grpc.SchedulerServiceStub(self._channel)
        self._task = asyncio.create_task(self._run(), name=f"worker-agent-{self.worker_id}")

    async def wait_registered(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self.registered.wait(), timeout)

    async def stop(self, *, deregister: bool = True) -> None:
        """End the background task and pending callbacks; deregister unless told not to."""
        tasks = [t for t in (self._task, *self._job_tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if deregister and self._stub is not None and self.registered.is_set():
            await self._deregister()
        if self._channel is not None:
            await self._channel.close()
        self._task = self._channel = self._stub = None

    async def get_job(self, job_id: str) -> job_pb2.Job:
        """The job with every assignment (a Coordinator finds its Trainer and Rollout here)."""
        response = await self._scheduler().GetJob(pb.GetJobRequest(job_id=job_id), timeout=self.rpc_timeout)
        return response.job

    def _scheduler(self) -> pb_grpc.SchedulerServiceStub:
        if self._stub is None:
            raise RuntimeError("WorkerAgent is not started")
        return self._stub

    async def _run(self) -> None:
        while True:
            await self._register()
            await self._heartbeat_until_forgotten()
            self.registered.clear()
            self._apply_lost_everything()

    async def _register(self) -> None:
        for attempt, delay in enumerate(self.backoff.delays(), start=1):
            try:
                response = await self._scheduler().RegisterWorker(self.registration, timeout=self.rpc_timeout)
            except grpc.aio.AioRpcError as error:
                self._log_rpc_failure("register_failed", error, attempt=attempt, retry_in_seconds=delay)
                await asyncio.sleep(delay)
                continue
            self._set_interval(response.heartbeat_interval.ToMilliseconds())
            self.lease_ttl = response.worker.heartbeat_ttl.ToMilliseconds() / 1000 or None
            self._renewed_at = asyncio.get_running_loop().time()
            log.info("worker_registered", worker_id=self.worker_id, scheduler=self.scheduler_address,
                     attempts=attempt, heartbeat_interval_seconds=self.heartbeat_interval)
            self.registered.set()
            return

    async def _heartbeat_until_forgotten(self) -> None:
        """Heartbeat every interval; returns when the scheduler answers NOT_FOUND."""
        loop = asyncio.get_running_loop()
        sent: list[worker_pb2.ResidentModel] = []  # a registration holds no resident models
        while True:
            resident = await self._next_heartbeat(sent)
            request = pb.HeartbeatRequest(worker_id=self.worker_id, lease_ids=sorted(self._assignments),
                                          resident_models=resident)
            sent = resident  # a failed heartbeat is retried at the interval, not at every check
            try:
                response = await self._scheduler().Heartbeat(request, timeout=self.rpc_timeout)
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    log.warning("worker_forgotten_registering_again", worker_id=self.worker_id)
                    return
                self._log_rpc_failure("heartbeat_failed", error)
                self._stop_jobs_past_the_ttl(loop.time())
                continue
            self._renewed_at = loop.time()
            self._set_interval(response.heartbeat_interval.ToMilliseconds())
            self._apply(response.assignments, response.stop_job_ids)

    async def _next_heartbeat(self, sent: list[worker_pb2.ResidentModel]) -> list[worker_pb2.ResidentModel]:
        """Waits a heartbeat interval, or less when the resident report differs from the one the
        Scheduler last heard (`sent`); returns the report to send."""
        loop = asyncio.get_running_loop()
        due = loop.time() + self.heartbeat_interval
        while self.resident_models is not None and loop.time() < due:
            await asyncio.sleep(min(REPORT_CHECK_SECONDS, max(0.0, due - loop.time())))
            resident = self._resident()
            if resident != sent:
                return resident
        await asyncio.sleep(max(0.0, due - loop.time()))
        return self._resident()

    def _stop_jobs_past_the_ttl(self, now: float) -> None:
        """Unheard by the Scheduler for longer than the worker TTL, this worker's leases have
        expired there (each renewal ran before its answer arrived) and its jobs go elsewhere:
        stop serving them now, so a worker cut off from the Scheduler (a network partition)
        never trains on beside the job's next attempt. A heartbeat that gets through again
        brings back whatever is still assigned here."""
        if self.lease_ttl is None or not self._assignments or now - self._renewed_at <= self.lease_ttl:
            return
        log.warning("leases_presumed_expired", worker_id=self.worker_id,
                    unheard_seconds=round(now - self._renewed_at, 1), ttl_seconds=self.lease_ttl,
                    jobs=sorted({a.lease.job_id for a in self._assignments.values()}))
        self._apply_lost_everything()

    def _resident(self) -> list[worker_pb2.ResidentModel]:
        if self.resident_models is None:
            return []
        try:
            models = self.resident_models()
        except Exception as error:  # noqa: BLE001 - a heartbeat never fails for a report
            log.warning("resident_models_unavailable", worker_id=self.worker_id, error=repr(error))
            return []
        return [worker_pb2.ResidentModel(device_id=m.device_id, model_key=m.model_key, job_ids=list(m.job_ids))
                for m in models]

    def _set_interval(self, milliseconds: int) -> None:
        if milliseconds > 0:
            self.heartbeat_interval = milliseconds / 1000

    def _apply(self, assignments: Sequence[job_pb2.Assignment], stop_job_ids: Sequence[str]) -> None:
        """Start new assignments, stop jobs listed or no longer assigned."""
        stop = set(stop_job_ids)
        current = {a.lease.lease_id: a for a in assignments if a.lease.job_id not in stop}
        for lease_id, assignment in current.items():
            if lease_id not in self._assignments:
                self._assignments[lease_id] = assignment
                self._stopped_jobs.discard(assignment.lease.job_id)
                self._spawn(assignment.lease.job_id, partial(self.on_assignment, assignment))
        still_assigned = {a.lease.job_id for a in current.values()}
        for lease_id in [lid for lid in self._assignments if lid not in current]:
            job_id = self._assignments.pop(lease_id).lease.job_id
            if job_id not in still_assigned:  # a newer lease of the same job (a re-queued attempt) goes on
                stop.add(job_id)
        for job_id in sorted(stop - self._stopped_jobs):
            self._stopped_jobs.add(job_id)
            self._spawn(job_id, partial(self.on_stop, job_id))

    def _apply_lost_everything(self) -> None:
        self._apply([], [])

    def _spawn(self, job_id: str, callback: Callable[[], Awaitable[None]]) -> None:
        """Run a callback after the job's previous one; failures are logged, never raised."""
        previous = self._job_tasks.get(job_id)

        async def run_in_order() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            try:
                await callback()
            except Exception:  # noqa: BLE001 - a failing callback must not stop the heartbeats
                log.exception("worker_callback_failed", worker_id=self.worker_id, job_id=job_id)

        task = asyncio.create_task(run_in_order())
        self._job_tasks[job_id] = task
        task.add_done_callback(lambda done: self._forget_task(job_id, done))

    def _forget_task(self, job_id: str, task: asyncio.Task[None]) -> None:
        if self._job_tasks.get(job_id) is task:
            del self._job_tasks[job_id]

    async def _deregister(self) -> None:
        try:
            await self._scheduler().DeregisterWorker(pb.DeregisterWorkerRequest(worker_id=self.worker_id),
                                                     timeout=self.rpc_timeout)
        except grpc.aio.AioRpcError as error:
            self._log_rpc_failure("deregister_failed", error)

    def _log_rpc_failure(self, event: str, error: grpc.aio.AioRpcError, **fields: Any) -> None:
        log.warning(event, worker_id=self.worker_id, scheduler=self.scheduler_address,
                    code=error.code().name, details=error.details(), **fields)
