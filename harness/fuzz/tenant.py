"""The fuzzing target seen through a tenant's key (issue 20): every RPC is fuzzed as an ordinary
tenant would call it, on top of the admin pass (harness/fuzz/targets.LiveTarget).

`TenantTarget.setup()` gives the fixtures' tenant ("fuzz-tenant") a fresh key, a roomy quota and
objects of its own, made with its own key: a queued job and two EnvHosts it registered. Its valid
examples aim the Scheduler's tenant RPCs at those (its job, its workers, its tenant); every other
RPC gets the admin pass's examples, which a tenant key may not use. The oracle is the admin pass's
(`verdict`) with `tenant_key=True`: a tenant key never succeeds on an admin-only RPC. Cleanup and
the health checks after each batch use the admin key (`LiveTarget`).
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2, tenant_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as sc
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as sc_grpc
from harness.fuzz.rpcs import Request, Rpc
from harness.fuzz.targets import FIXTURE_DEADLINE_S, LiveTarget, queued_rl_spec

TENANT = "fuzz-tenant"
TENANT_ENVHOSTS = ("fuzz-tenant-envhost", "fuzz-tenant-envhost-victim")


class TenantTarget:
    """`live`'s services, fuzzed with a key of tenant TENANT."""

    tenant_key = True

    def __init__(self, live: LiveTarget) -> None:
        self.live = live
        self.metadata: Sequence[tuple[str, str]] = ()
        self.ids: dict[str, str] = {}

    def setup(self) -> None:
        live = self.live
        live.call("scheduler", "UpdateTenantQuota", sc.UpdateTenantQuotaRequest(tenant_id=TENANT, quota=tenant_pb2.Quota(
            max_queued_jobs=1000, max_concurrent_jobs=2, max_devices=4)))
        secret = live.call("scheduler", "CreateApiKey", sc.CreateApiKeyRequest(tenant_id=TENANT)).secret
        self.metadata = (("authorization", f"Bearer {secret}"),)
        stub = sc_grpc.SchedulerServiceStub(live.channel("scheduler"))
        self.ids["job"] = stub.SubmitJob(sc.SubmitJobRequest(spec=queued_rl_spec()), timeout=FIXTURE_DEADLINE_S,
                                         metadata=self.metadata).job.job_id
        for worker_id in TENANT_ENVHOSTS:
            stub.RegisterWorker(self._envhost(worker_id), timeout=FIXTURE_DEADLINE_S, metadata=self.metadata)

    @staticmethod
    def _envhost(worker_id: str) -> sc.RegisterWorkerRequest:
        """An EnvHost of the tenant's, at an address nobody listens on (no job of the fuzz runs)."""
        return sc.RegisterWorkerRequest(worker_id=worker_id, name=worker_id, role=resources_pb2.ROLE_ENVHOST,
                                        address="127.0.0.1:9", version="fuzz")

    def channel(self, service: str) -> grpc.Channel:
        return self.live.channel(service)

    def examples(self, rpc: Rpc) -> list[Request]:
        own = self._own_examples() if rpc.service == "scheduler" else {}
        return own.get(rpc.method.name) or self.live.examples(rpc)

    def _own_examples(self) -> dict[str, list[Request]]:
        job, (envhost, victim) = self.ids["job"], TENANT_ENVHOSTS
        spec = queued_rl_spec()
        on_own_envhost = queued_rl_spec()
        on_own_envhost.environment.envhost = envhost
        return {
            "SubmitJob": [sc.SubmitJobRequest(spec=spec, validate_only=True), sc.SubmitJobRequest(spec=on_own_envhost)],
            "GetJob": [sc.GetJobRequest(job_id=job)],
            "ListJobs": [sc.ListJobsRequest(page_size=5, states=[job_pb2.Job.STATE_QUEUED])],
            "CancelJob": [sc.CancelJobRequest(job_id=job, reason="fuzz")],
            "WatchJob": [sc.WatchJobRequest(job_id=job)],
            "ListJobSamples": [sc.ListJobSamplesRequest(job_id=job, step=1, split="train", page_size=5)],
            "ListArtifacts": [sc.ListArtifactsRequest(job_id=job)],
            "DownloadArtifact": [sc.DownloadArtifactRequest(artifact_id=f"{job}-final", path_prefix="adapter")],
            "RegisterWorker": [self._envhost(envhost)],
            "Heartbeat": [sc.HeartbeatRequest(worker_id=envhost)],
            "DeregisterWorker": [sc.DeregisterWorkerRequest(worker_id=victim)],
            "ListWorkers": [sc.ListWorkersRequest(page_size=5, role=resources_pb2.ROLE_ENVHOST)],
            "CheckJobToken": [sc.CheckJobTokenRequest(job_id=job, job_token="otj_" + "x" * 43)],
            "GetTenant": [sc.GetTenantRequest(tenant_id=TENANT)],
            "ListApiKeys": [sc.ListApiKeysRequest(tenant_id=TENANT, page_size=5)],
        }

    def after_batch(self, rpc: Rpc) -> None:
        self.live.after_batch(rpc)

    def health_problems(self, service: str) -> list[str]:
        return self.live.health_problems(service)
