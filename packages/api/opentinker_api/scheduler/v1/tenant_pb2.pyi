import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tenant(_message.Message):
    __slots__ = ("tenant_id", "display_name", "quota", "create_time", "usage")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    display_name: str
    quota: Quota
    create_time: _timestamp_pb2.Timestamp
    usage: Usage
    def __init__(self, tenant_id: _Optional[str] = ..., display_name: _Optional[str] = ..., quota: _Optional[_Union[Quota, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class Quota(_message.Message):
    __slots__ = ("max_devices", "max_concurrent_jobs", "max_queued_jobs")
    MAX_DEVICES_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_JOBS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_JOBS_FIELD_NUMBER: _ClassVar[int]
    max_devices: int
    max_concurrent_jobs: int
    max_queued_jobs: int
    def __init__(self, max_devices: _Optional[int] = ..., max_concurrent_jobs: _Optional[int] = ..., max_queued_jobs: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("devices", "running_jobs", "queued_jobs")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_JOBS_FIELD_NUMBER: _ClassVar[int]
    devices: int
    running_jobs: int
    queued_jobs: int
    def __init__(self, devices: _Optional[int] = ..., running_jobs: _Optional[int] = ..., queued_jobs: _Optional[int] = ...) -> None: ...

class ApiKey(_message.Message):
    __slots__ = ("key_id", "tenant_id", "admin", "description", "create_time", "revoke_time")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TIME_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    tenant_id: str
    admin: bool
    description: str
    create_time: _timestamp_pb2.Timestamp
    revoke_time: _timestamp_pb2.Timestamp
    def __init__(self, key_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., admin: _Optional[bool] = ..., description: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoke_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
