import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from opentinker_api.common.v1 import resources_pb2 as _resources_pb2
from opentinker_api.scheduler.v1 import job_pb2 as _job_pb2
from opentinker_api.scheduler.v1 import tenant_pb2 as _tenant_pb2
from opentinker_api.scheduler.v1 import worker_pb2 as _worker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitJobRequest(_message.Message):
    __slots__ = ("request_id", "spec", "validate_only")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    spec: _job_pb2.JobSpec
    validate_only: bool
    def __init__(self, request_id: _Optional[str] = ..., spec: _Optional[_Union[_job_pb2.JobSpec, _Mapping]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job", "created")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    created: bool
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "states", "type")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[_job_pb2.Job.State]
    type: _job_pb2.JobType
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_job_pb2.Job.State, str]]] = ..., type: _Optional[_Union[_job_pb2.JobType, str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_job_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_job_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id", "request_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    request_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., request_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id", "after_sequence", "follow_after_end")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_AFTER_END_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    after_sequence: int
    follow_after_end: bool
    def __init__(self, job_id: _Optional[str] = ..., after_sequence: _Optional[int] = ..., follow_after_end: _Optional[bool] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _job_pb2.JobEvent
    def __init__(self, event: _Optional[_Union[_job_pb2.JobEvent, _Mapping]] = ...) -> None: ...

class ListJobSamplesRequest(_message.Message):
    __slots__ = ("job_id", "step", "split", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    step: int
    split: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., step: _Optional[int] = ..., split: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobSamplesResponse(_message.Message):
    __slots__ = ("samples", "next_page_token")
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[_job_pb2.SamplesReported]
    next_page_token: str
    def __init__(self, samples: _Optional[_Iterable[_Union[_job_pb2.SamplesReported, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ArtifactFile(_message.Message):
    __slots__ = ("path", "size_bytes", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    size_bytes: int
    sha256: str
    def __init__(self, path: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("artifact_id", "job_id", "kind", "format", "step", "size_bytes", "files", "loadable_dirs")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[Artifact.Kind]
        KIND_CHECKPOINT: _ClassVar[Artifact.Kind]
        KIND_OUTPUT: _ClassVar[Artifact.Kind]
    KIND_UNSPECIFIED: Artifact.Kind
    KIND_CHECKPOINT: Artifact.Kind
    KIND_OUTPUT: Artifact.Kind
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    LOADABLE_DIRS_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    job_id: str
    kind: Artifact.Kind
    format: str
    step: int
    size_bytes: int
    files: _containers.RepeatedCompositeFieldContainer[ArtifactFile]
    loadable_dirs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, artifact_id: _Optional[str] = ..., job_id: _Optional[str] = ..., kind: _Optional[_Union[Artifact.Kind, str]] = ..., format: _Optional[str] = ..., step: _Optional[int] = ..., size_bytes: _Optional[int] = ..., files: _Optional[_Iterable[_Union[ArtifactFile, _Mapping]]] = ..., loadable_dirs: _Optional[_Iterable[str]] = ...) -> None: ...

class ListArtifactsRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListArtifactsResponse(_message.Message):
    __slots__ = ("artifacts", "next_page_token")
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    next_page_token: str
    def __init__(self, artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DownloadArtifactRequest(_message.Message):
    __slots__ = ("artifact_id", "path_prefix")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_PREFIX_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    path_prefix: str
    def __init__(self, artifact_id: _Optional[str] = ..., path_prefix: _Optional[str] = ...) -> None: ...

class DownloadArtifactResponse(_message.Message):
    __slots__ = ("file", "data")
    FILE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    file: ArtifactFile
    data: bytes
    def __init__(self, file: _Optional[_Union[ArtifactFile, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("request_id", "worker_id", "role", "address", "devices", "labels", "version", "name")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    worker_id: str
    role: _resources_pb2.Role
    address: str
    devices: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Device]
    labels: _containers.ScalarMap[str, str]
    version: str
    name: str
    def __init__(self, request_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., role: _Optional[_Union[_resources_pb2.Role, str]] = ..., address: _Optional[str] = ..., devices: _Optional[_Iterable[_Union[_resources_pb2.Device, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., version: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class RegisterWorkerResponse(_message.Message):
    __slots__ = ("worker", "heartbeat_interval")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    worker: _worker_pb2.Worker
    heartbeat_interval: _duration_pb2.Duration
    def __init__(self, worker: _Optional[_Union[_worker_pb2.Worker, _Mapping]] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "lease_ids", "load", "resident_models")
    class LoadEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_MODELS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease_ids: _containers.RepeatedScalarFieldContainer[str]
    load: _containers.ScalarMap[str, float]
    resident_models: _containers.RepeatedCompositeFieldContainer[_worker_pb2.ResidentModel]
    def __init__(self, worker_id: _Optional[str] = ..., lease_ids: _Optional[_Iterable[str]] = ..., load: _Optional[_Mapping[str, float]] = ..., resident_models: _Optional[_Iterable[_Union[_worker_pb2.ResidentModel, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("assignments", "stop_job_ids", "heartbeat_interval")
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    STOP_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    assignments: _containers.RepeatedCompositeFieldContainer[_job_pb2.Assignment]
    stop_job_ids: _containers.RepeatedScalarFieldContainer[str]
    heartbeat_interval: _duration_pb2.Duration
    def __init__(self, assignments: _Optional[_Iterable[_Union[_job_pb2.Assignment, _Mapping]]] = ..., stop_job_ids: _Optional[_Iterable[str]] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DeregisterWorkerRequest(_message.Message):
    __slots__ = ("worker_id", "drain")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    drain: bool
    def __init__(self, worker_id: _Optional[str] = ..., drain: _Optional[bool] = ...) -> None: ...

class DeregisterWorkerResponse(_message.Message):
    __slots__ = ("worker",)
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: _worker_pb2.Worker
    def __init__(self, worker: _Optional[_Union[_worker_pb2.Worker, _Mapping]] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "role")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    role: _resources_pb2.Role
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., role: _Optional[_Union[_resources_pb2.Role, str]] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers", "next_page_token")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[_worker_pb2.Worker]
    next_page_token: str
    def __init__(self, workers: _Optional[_Iterable[_Union[_worker_pb2.Worker, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CheckJobTokenRequest(_message.Message):
    __slots__ = ("job_id", "job_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_token: str
    def __init__(self, job_id: _Optional[str] = ..., job_token: _Optional[str] = ...) -> None: ...

class CheckJobTokenResponse(_message.Message):
    __slots__ = ("tenant_id",)
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    def __init__(self, tenant_id: _Optional[str] = ...) -> None: ...

class ReportJobEventsRequest(_message.Message):
    __slots__ = ("lease", "events", "request_id")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    lease: _resources_pb2.LeaseContext
    events: _containers.RepeatedCompositeFieldContainer[_job_pb2.JobEvent]
    request_id: str
    def __init__(self, lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_job_pb2.JobEvent, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReportJobEventsResponse(_message.Message):
    __slots__ = ("last_sequence",)
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    last_sequence: int
    def __init__(self, last_sequence: _Optional[int] = ...) -> None: ...

class FinishJobRequest(_message.Message):
    __slots__ = ("lease", "final_state", "message", "request_id")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    FINAL_STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    lease: _resources_pb2.LeaseContext
    final_state: _job_pb2.Job.State
    message: str
    request_id: str
    def __init__(self, lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., final_state: _Optional[_Union[_job_pb2.Job.State, str]] = ..., message: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class FinishJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class CreateTenantRequest(_message.Message):
    __slots__ = ("tenant_id", "display_name", "quota", "request_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    display_name: str
    quota: _tenant_pb2.Quota
    request_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., display_name: _Optional[str] = ..., quota: _Optional[_Union[_tenant_pb2.Quota, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateTenantResponse(_message.Message):
    __slots__ = ("tenant", "api_key", "api_key_secret")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    API_KEY_SECRET_FIELD_NUMBER: _ClassVar[int]
    tenant: _tenant_pb2.Tenant
    api_key: _tenant_pb2.ApiKey
    api_key_secret: str
    def __init__(self, tenant: _Optional[_Union[_tenant_pb2.Tenant, _Mapping]] = ..., api_key: _Optional[_Union[_tenant_pb2.ApiKey, _Mapping]] = ..., api_key_secret: _Optional[str] = ...) -> None: ...

class GetTenantRequest(_message.Message):
    __slots__ = ("tenant_id",)
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    def __init__(self, tenant_id: _Optional[str] = ...) -> None: ...

class GetTenantResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: _tenant_pb2.Tenant
    def __init__(self, tenant: _Optional[_Union[_tenant_pb2.Tenant, _Mapping]] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants", "next_page_token")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[_tenant_pb2.Tenant]
    next_page_token: str
    def __init__(self, tenants: _Optional[_Iterable[_Union[_tenant_pb2.Tenant, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateTenantQuotaRequest(_message.Message):
    __slots__ = ("tenant_id", "quota")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    quota: _tenant_pb2.Quota
    def __init__(self, tenant_id: _Optional[str] = ..., quota: _Optional[_Union[_tenant_pb2.Quota, _Mapping]] = ...) -> None: ...

class UpdateTenantQuotaResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: _tenant_pb2.Tenant
    def __init__(self, tenant: _Optional[_Union[_tenant_pb2.Tenant, _Mapping]] = ...) -> None: ...

class CreateApiKeyRequest(_message.Message):
    __slots__ = ("tenant_id", "admin", "description", "request_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    admin: bool
    description: str
    request_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., admin: _Optional[bool] = ..., description: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateApiKeyResponse(_message.Message):
    __slots__ = ("api_key", "secret")
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    api_key: _tenant_pb2.ApiKey
    secret: str
    def __init__(self, api_key: _Optional[_Union[_tenant_pb2.ApiKey, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListApiKeysRequest(_message.Message):
    __slots__ = ("tenant_id", "page_size", "page_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    page_size: int
    page_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListApiKeysResponse(_message.Message):
    __slots__ = ("api_keys", "next_page_token")
    API_KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    api_keys: _containers.RepeatedCompositeFieldContainer[_tenant_pb2.ApiKey]
    next_page_token: str
    def __init__(self, api_keys: _Optional[_Iterable[_Union[_tenant_pb2.ApiKey, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RevokeApiKeyRequest(_message.Message):
    __slots__ = ("key_id",)
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    def __init__(self, key_id: _Optional[str] = ...) -> None: ...

class RevokeApiKeyResponse(_message.Message):
    __slots__ = ("api_key",)
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    api_key: _tenant_pb2.ApiKey
    def __init__(self, api_key: _Optional[_Union[_tenant_pb2.ApiKey, _Mapping]] = ...) -> None: ...
