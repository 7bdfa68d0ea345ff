"""The SchedulerService servicer: converts protobuf <-> domain objects and calls the domain.

Every call acts for `current_principal()` (the API key the AuthInterceptor verified; with auth
disabled, an admin of the `default` tenant). Errors are the Scheduler's DomainErrors, mapped by
the service edge (`opentinker_runtime.edge`); a Redis outage is UNAVAILABLE (`store_outage`).
A job's token (`x-opentinker-job-token`) is shown in Heartbeat answers and to admin keys in
GetJob, and required on the Coordinator's reports (ReportJobEvents, FinishJob: admin keys only,
refused before the token is looked at, so a tenant key learns nothing of a job).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import grpc

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.interceptor import current_principal
from opentinker_runtime.core.redis_store import REDIS_DOWN_ERRORS
from opentinker_runtime.core.server import ServiceBinding
from opentinker_runtime.edge.convert import lease_from_proto
from opentinker_runtime.edge.handlers import Translation, servicer_base
from opentinker_runtime.edge.job_token import job_token
from opentinker_scheduler.app import Scheduler
from opentinker_scheduler.errors import store_outage
from opentinker_scheduler.convert_artifacts import artifact_file_to_proto, artifact_to_proto
from opentinker_scheduler.convert_common import duration
from opentinker_scheduler.convert_samples import samples_to_proto
from opentinker_scheduler.convert_jobs import (
    event_to_proto,
    facts_from_spec,
    job_to_proto,
    job_type_from_proto,
    payload_from_proto,
    spec_blob,
    state_from_proto,
)
from opentinker_scheduler.convert_tenants import api_key_to_proto, caller_from_principal, quota_from_proto, tenant_to_proto
from opentinker_scheduler.convert_workers import (
    assignment_to_proto,
    registration_from_proto,
    resident_from_proto,
    role_from_proto,
    worker_to_proto,
)

SERVICE = pb.DESCRIPTOR.services_by_name["SchedulerService"]
SERVICE_FULL_NAME = SERVICE.full_name
Context = grpc.aio.ServicerContext
STORE_OUTAGES = Translation(errors=REDIS_DOWN_ERRORS, to_domain=store_outage)


def caller():  # noqa: ANN201
    return caller_from_principal(current_principal())


class SchedulerServicer(servicer_base(pb_grpc.SchedulerServiceServicer, SERVICE,  # type: ignore[misc]
                                     translation=STORE_OUTAGES)):
    def __init__(self, scheduler: Scheduler) -> None:
        self.jobs = scheduler.jobs
        self.pool = scheduler.pool
        self.admin = scheduler.tenant_admin
        self.tokens = scheduler.tokens
        self.artifacts = scheduler.artifacts
        self.interval = duration(scheduler.config.heartbeat_interval_ms)

    async def SubmitJob(self, request: pb.SubmitJobRequest, context: Context) -> pb.SubmitJobResponse:
        job, created = await self.jobs.submit(facts_from_spec(request.spec), spec_blob(request.spec),
                                              caller=caller(), request_id=request.request_id,
                                              validate_only=request.validate_only)
        return pb.SubmitJobResponse(job=job_to_proto(job), created=created)

    async def GetJob(self, request: pb.GetJobRequest, context: Context) -> pb.GetJobResponse:
        who = caller()
        job = await self.jobs.get(request.job_id, who)
        return pb.GetJobResponse(job=job_to_proto(job, job_token=self.tokens.token_shown_to(who, job)))

    async def ListJobs(self, request: pb.ListJobsRequest, context: Context) -> pb.ListJobsResponse:
        states = [state_from_proto(s, field=f"states[{i}]") for i, s in enumerate(request.states)]
        page = await self.jobs.list(caller(), size=request.page_size, token=request.page_token, states=states,
                                    job_type=job_type_from_proto(request.type, field="type"))
        return pb.ListJobsResponse(jobs=[job_to_proto(j) for j in page.items],
                                   next_page_token=page.next_page_token)

    async def CancelJob(self, request: pb.CancelJobRequest, context: Context) -> pb.CancelJobResponse:
        job = await self.jobs.cancel(request.job_id, caller(), reason=request.reason)
        return pb.CancelJobResponse(job=job_to_proto(job))

    async def WatchJob(self, request: pb.WatchJobRequest,
                       context: Context) -> AsyncIterator[pb.WatchJobResponse]:
        events = self.jobs.watch(request.job_id, caller(), after_sequence=request.after_sequence,
                                 follow_after_end=request.follow_after_end)
        async with aclosing(events):  # a cancelled call gives its stream's place back at once
            async for event in events:
                yield pb.WatchJobResponse(event=event_to_proto(event))

    async def ListJobSamples(self, request: pb.ListJobSamplesRequest, context: Context) -> pb.ListJobSamplesResponse:
        page = await self.jobs.samples(request.job_id, caller(),
                                       step=request.step if request.HasField("step") else None,
                                       split=request.split, size=request.page_size, token=request.page_token)
        return pb.ListJobSamplesResponse(samples=[samples_to_proto(s) for s in page.items],
                                         next_page_token=page.next_page_token)

    async def ListArtifacts(self, request: pb.ListArtifactsRequest, context: Context) -> pb.ListArtifactsResponse:
        page = await self.artifacts.list(request.job_id, caller(), size=request.page_size, token=request.page_token)
        return pb.ListArtifactsResponse(artifacts=[artifact_to_proto(a) for a in page.items],
                                        next_page_token=page.next_page_token)

    async def DownloadArtifact(self, request: pb.DownloadArtifactRequest,
                               context: Context) -> AsyncIterator[pb.DownloadArtifactResponse]:
        artifact, files = await self.artifacts.open(request.artifact_id, request.path_prefix, caller())
        async for file, chunk in self.artifacts.download(artifact, files):
            if file is not None:
                yield pb.DownloadArtifactResponse(file=artifact_file_to_proto(file))
            else:
                yield pb.DownloadArtifactResponse(data=chunk)

    async def RegisterWorker(self, request: pb.RegisterWorkerRequest,
                             context: Context) -> pb.RegisterWorkerResponse:
        worker = await self.pool.register(registration_from_proto(request), caller())
        return pb.RegisterWorkerResponse(worker=worker_to_proto(worker), heartbeat_interval=self.interval)

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Context) -> pb.HeartbeatResponse:
        result = await self.pool.heartbeat(request.worker_id, caller(), resident_from_proto(request.resident_models))
        assignments = [assignment_to_proto(a, job_token=result.job_tokens.get(a.lease.job_id, ""))
                       for a in result.assignments]
        return pb.HeartbeatResponse(assignments=assignments,
                                    stop_job_ids=result.stop_job_ids, heartbeat_interval=self.interval)

    async def DeregisterWorker(self, request: pb.DeregisterWorkerRequest,
                               context: Context) -> pb.DeregisterWorkerResponse:
        worker = await self.pool.deregister(request.worker_id, caller(), drain=request.drain)
        return pb.DeregisterWorkerResponse(worker=worker_to_proto(worker))

    async def ListWorkers(self, request: pb.ListWorkersRequest, context: Context) -> pb.ListWorkersResponse:
        page = await self.pool.list(caller(), size=request.page_size, token=request.page_token,
                                    role=role_from_proto(request.role, field="role"))
        return pb.ListWorkersResponse(workers=[worker_to_proto(w) for w in page.items],
                                      next_page_token=page.next_page_token)

    async def CheckJobToken(self, request: pb.CheckJobTokenRequest, context: Context) -> pb.CheckJobTokenResponse:
        job = await self.jobs.get(request.job_id, caller())
        self.tokens.require_current(job, request.job_token)
        return pb.CheckJobTokenResponse(tenant_id=job.tenant_id)

    @job_token(lease="lease", admin_only="ReportJobEvents (a worker's call)")
    async def ReportJobEvents(self, request: pb.ReportJobEventsRequest,
                              context: Context) -> pb.ReportJobEventsResponse:
        who = caller()
        payloads = [payload_from_proto(e, field=f"events[{i}]") for i, e in enumerate(request.events)]
        sequence = await self.jobs.report(lease_from_proto(request.lease), payloads,
                                          caller=who, request_id=request.request_id)
        return pb.ReportJobEventsResponse(last_sequence=sequence)

    @job_token(lease="lease", admin_only="FinishJob (the Coordinator's call)")
    async def FinishJob(self, request: pb.FinishJobRequest, context: Context) -> pb.FinishJobResponse:
        who = caller()
        job = await self.jobs.finish(lease_from_proto(request.lease),
                                     state_from_proto(request.final_state, field="final_state"),
                                     caller=who, message=request.message)
        return pb.FinishJobResponse(job=job_to_proto(job))

    async def CreateTenant(self, request: pb.CreateTenantRequest, context: Context) -> pb.CreateTenantResponse:
        tenant, key, secret = await self.admin.create_tenant(
            caller(), tenant_id=request.tenant_id, display_name=request.display_name,
            quota=quota_from_proto(request.quota))
        return pb.CreateTenantResponse(tenant=tenant_to_proto(tenant), api_key=api_key_to_proto(key),
                                       api_key_secret=secret)

    async def GetTenant(self, request: pb.GetTenantRequest, context: Context) -> pb.GetTenantResponse:
        return pb.GetTenantResponse(tenant=tenant_to_proto(await self.admin.get_tenant(caller(), request.tenant_id)))

    async def ListTenants(self, request: pb.ListTenantsRequest, context: Context) -> pb.ListTenantsResponse:
        page = await self.admin.list_tenants(caller(), size=request.page_size, token=request.page_token)
        return pb.ListTenantsResponse(tenants=[tenant_to_proto(t) for t in page.items],
                                      next_page_token=page.next_page_token)

    async def UpdateTenantQuota(self, request: pb.UpdateTenantQuotaRequest,
                                context: Context) -> pb.UpdateTenantQuotaResponse:
        tenant = await self.admin.update_quota(caller(), request.tenant_id, quota_from_proto(request.quota))
        return pb.UpdateTenantQuotaResponse(tenant=tenant_to_proto(tenant))

    async def CreateApiKey(self, request: pb.CreateApiKeyRequest, context: Context) -> pb.CreateApiKeyResponse:
        key, secret = await self.admin.create_api_key(caller(), tenant_id=request.tenant_id,
                                                      admin=request.admin, description=request.description)
        return pb.CreateApiKeyResponse(api_key=api_key_to_proto(key), secret=secret)

    async def ListApiKeys(self, request: pb.ListApiKeysRequest, context: Context) -> pb.ListApiKeysResponse:
        page = await self.admin.list_api_keys(caller(), request.tenant_id, size=request.page_size,
                                              token=request.page_token)
        return pb.ListApiKeysResponse(api_keys=[api_key_to_proto(k) for k in page.items],
                                      next_page_token=page.next_page_token)

    async def RevokeApiKey(self, request: pb.RevokeApiKeyRequest, context: Context) -> pb.RevokeApiKeyResponse:
        return pb.RevokeApiKeyResponse(api_key=api_key_to_proto(await self.admin.revoke_api_key(caller(), request.key_id)))


def scheduler_service_binding(scheduler: Scheduler) -> ServiceBinding:
    """The SchedulerService backed by `scheduler`."""
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=SchedulerServicer(scheduler),
                          add_to_server=pb_grpc.add_SchedulerServiceServicer_to_server)
