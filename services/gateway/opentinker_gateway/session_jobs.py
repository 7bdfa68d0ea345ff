"""SESSION jobs: how a Tinker training client gets its devices through the Scheduler.

The gateway registers as a GATEWAY worker. `lease` submits a SESSION job with the tenant's own key
(so its quota and the fair queue apply), waits until the Scheduler has leased a Trainer and a
Rollout device for it and this gateway holds its driver slot, and reads the leases and the job token
with the stack's key. `finish` ends the job through the driver lease. A CancelJob of the tenant
reaches `on_stop`; an assignment for a job this gateway does not know (it restarted and lost the
client's state) fails that job at once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import grpc
import structlog
from google.protobuf import json_format

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.auth.job_tokens import JOB_TOKEN_METADATA_KEY, job_token_of
from opentinker_runtime.jobplan import resolve_job_plan
from opentinker_runtime.workers.agent import WorkerAgent
from opentinker_runtime.workers.assignments import replica_peers, role_assignments
from opentinker_gateway.backend import Placement, gateway_error
from opentinker_gateway.errors import GatewayError, Unavailable

log = structlog.get_logger("opentinker.gateway.session_jobs")
ENDED = {job_pb2.Job.STATE_SUCCEEDED, job_pb2.Job.STATE_FAILED, job_pb2.Job.STATE_CANCELLED}
POLL_SECONDS = 0.1
StopCallback = Callable[[str], Awaitable[None]]


class SessionJobs:
    def __init__(self, *, scheduler_address: str, worker_address: str, api_key: str, lease_timeout: float) -> None:
        self.scheduler_address = scheduler_address
        self.api_key = api_key
        self.lease_timeout = lease_timeout
        self.on_stop: StopCallback | None = None
        self._known: set[str] = set()
        self._driver: dict[str, resources_pb2.LeaseContext] = {}
        self._tokens: dict[str, str] = {}
        self._tenant_channel = authenticated_channel(scheduler_address, "")
        self._tenant_stub = pb_grpc.SchedulerServiceStub(self._tenant_channel)
        self._admin_channel = authenticated_channel(scheduler_address, api_key)
        self._admin_stub = pb_grpc.SchedulerServiceStub(self._admin_channel)
        self.agent = WorkerAgent(scheduler_address=scheduler_address, role="gateway",
                                 worker_id=f"gateway@{worker_address}", address=worker_address,
                                 on_assignment=self._assigned, on_stop=self._stopped, api_key=api_key)

    async def start(self) -> None:
        await self.agent.start()

    async def close(self) -> None:
        await self.agent.stop()
        await self._tenant_channel.close()
        await self._admin_channel.close()

    async def lease(self, tenant_key: str, spec: dict) -> tuple[Placement, resources_pb2.LeaseContext]:
        """Submit a SESSION job as the tenant; its placement once every device is leased."""
        job_id = await self._submit(tenant_key, spec)
        self._known.add(job_id)
        try:
            return await asyncio.wait_for(self._placement(job_id, _roles_of(spec)), self.lease_timeout)
        except asyncio.TimeoutError:
            await self._cancel(tenant_key, job_id)
            raise Unavailable(f"job {job_id} got no devices within {self.lease_timeout:g} s (the Scheduler "
                              f"queues it behind other jobs, or no Trainer/Rollout worker is free); "
                              f"it was cancelled") from None
        except BaseException:
            self._known.discard(job_id)
            raise

    async def finish(self, job_id: str, *, succeeded: bool, message: str) -> None:
        lease, token = self._driver.pop(job_id, None), self._tokens.pop(job_id, "")
        self._known.discard(job_id)
        if lease is None:
            return
        state = job_pb2.Job.STATE_SUCCEEDED if succeeded else job_pb2.Job.STATE_FAILED
        request = pb.FinishJobRequest(lease=lease, final_state=state, message=message, request_id=uuid.uuid4().hex)
        metadata = ((JOB_TOKEN_METADATA_KEY, token),) if token else ()
        try:
            await self._admin_stub.FinishJob(request, timeout=10, metadata=metadata)
        except grpc.aio.AioRpcError as error:
            log.warning("finish_failed", job_id=job_id, code=error.code().name, details=error.details())

    async def _submit(self, tenant_key: str, spec: dict) -> str:
        request = pb.SubmitJobRequest(spec=json_format.ParseDict(spec, job_pb2.JobSpec()),
                                      request_id=uuid.uuid4().hex)
        try:
            response = await self._tenant_stub.SubmitJob(request, timeout=30, metadata=_bearer(tenant_key))
        except grpc.aio.AioRpcError as error:
            raise gateway_error(error, "create_model") from None
        return response.job.job_id

    async def _placement(self, job_id: str, roles_needed: set[int]) -> tuple[Placement, resources_pb2.LeaseContext]:
        while True:
            job = await self._job(job_id)
            if job.state in ENDED:
                raise GatewayError(f"job {job_id} ended before it started: {job.status_message}")
            roles = {a.role: a for a in job.assignments}
            if job.state == job_pb2.Job.STATE_RUNNING and roles_needed <= roles.keys():
                driver = roles[resources_pb2.ROLE_GATEWAY].lease
                self._driver[job_id] = driver
                self._tokens[job_id] = job_token_of(job)
                return _placement_of(job, roles), driver
            await asyncio.sleep(POLL_SECONDS)

    async def _job(self, job_id: str) -> job_pb2.Job:
        try:
            return (await self._admin_stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job
        except grpc.aio.AioRpcError as error:
            raise gateway_error(error, "create_model") from None

    async def _cancel(self, tenant_key: str, job_id: str) -> None:
        try:
            await self._tenant_stub.CancelJob(pb.CancelJobRequest(job_id=job_id), timeout=10,
                                              metadata=_bearer(tenant_key))
        except grpc.aio.AioRpcError as error:
            log.warning("cancel_failed", job_id=job_id, code=error.code().name)

    async def _assigned(self, assignment: job_pb2.Assignment) -> None:
        job_id = assignment.lease.job_id
        if job_id in self._known:
            return
        await asyncio.sleep(1.0)  # a job this gateway is submitting right now becomes known at once
        if job_id in self._known:
            return
        log.warning("unknown_session_job", job_id=job_id)
        self._driver[job_id] = assignment.lease
        self._tokens[job_id] = assignment.job_token
        await self.finish(job_id, succeeded=False, message="the gateway that drove this Tinker session "
                          "restarted; the session's client state is gone (create a new training client, "
                          "e.g. from its last saved state)")

    async def _stopped(self, job_id: str) -> None:
        self._driver.pop(job_id, None)
        self._tokens.pop(job_id, None)
        if job_id in self._known and self.on_stop is not None:
            self._known.discard(job_id)
            await self.on_stop(job_id)


def _roles_of(spec: dict) -> set[int]:
    """The roles whose leases a SESSION job's spec asks for (its plan's: the job type's default
    when it names none), and the gateway's own driver slot. The Scheduler accepted the spec."""
    plan = resolve_job_plan(json_format.ParseDict(spec, job_pb2.JobSpec()))
    return {resources_pb2.Role.Value(f"ROLE_{r.role}") for r in plan.resources} | {resources_pb2.ROLE_GATEWAY}


def _placement_of(job: job_pb2.Job, roles: dict[int, job_pb2.Assignment]) -> Placement:
    trainers, rollout = role_assignments(job, resources_pb2.ROLE_TRAINER), roles[resources_pb2.ROLE_ROLLOUT]
    trainer = trainers[0] if trainers else None  # rank 0's, when the Trainer devices span workers
    return Placement(job_id=job.job_id, job_token=job_token_of(job), trainer_address=trainer.address if trainer else "",
                     trainer_lease=trainer.lease if trainer else resources_pb2.LeaseContext(),
                     trainer_devices=tuple(trainer.device_ids) if trainer else (),
                     trainer_peers=tuple(replica_peers(trainers)),
                     rollout_address=rollout.address, rollout_lease=rollout.lease)


def _bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),) if key else ()
