import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from opentinker_api.common.v1 import resources_pb2 as _resources_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Worker(_message.Message):
    __slots__ = ("worker_id", "role", "address", "devices", "state", "register_time", "last_heartbeat_time", "heartbeat_ttl", "leases", "labels", "version", "name", "tenant_id", "resident_models")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Worker.State]
        STATE_ALIVE: _ClassVar[Worker.State]
        STATE_DRAINING: _ClassVar[Worker.State]
        STATE_DEAD: _ClassVar[Worker.State]
    STATE_UNSPECIFIED: Worker.State
    STATE_ALIVE: Worker.State
    STATE_DRAINING: Worker.State
    STATE_DEAD: Worker.State
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REGISTER_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_TIME_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TTL_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_MODELS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    role: _resources_pb2.Role
    address: str
    devices: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Device]
    state: Worker.State
    register_time: _timestamp_pb2.Timestamp
    last_heartbeat_time: _timestamp_pb2.Timestamp
    heartbeat_ttl: _duration_pb2.Duration
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    labels: _containers.ScalarMap[str, str]
    version: str
    name: str
    tenant_id: str
    resident_models: _containers.RepeatedCompositeFieldContainer[ResidentModel]
    def __init__(self, worker_id: _Optional[str] = ..., role: _Optional[_Union[_resources_pb2.Role, str]] = ..., address: _Optional[str] = ..., devices: _Optional[_Iterable[_Union[_resources_pb2.Device, _Mapping]]] = ..., state: _Optional[_Union[Worker.State, str]] = ..., register_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_heartbeat_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., heartbeat_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., version: _Optional[str] = ..., name: _Optional[str] = ..., tenant_id: _Optional[str] = ..., resident_models: _Optional[_Iterable[_Union[ResidentModel, _Mapping]]] = ...) -> None: ...

class ResidentModel(_message.Message):
    __slots__ = ("device_id", "model_key", "job_ids")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_KEY_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    model_key: str
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, device_id: _Optional[str] = ..., model_key: _Optional[str] = ..., job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("lease_id", "job_id", "worker_id", "device_ids", "fencing_token", "expire_time")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    job_id: str
    worker_id: str
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    fencing_token: int
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, lease_id: _Optional[str] = ..., job_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., device_ids: _Optional[_Iterable[str]] = ..., fencing_token: _Optional[int] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
