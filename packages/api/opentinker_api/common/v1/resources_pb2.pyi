from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeviceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_KIND_UNSPECIFIED: _ClassVar[DeviceKind]
    DEVICE_KIND_CPU: _ClassVar[DeviceKind]
    DEVICE_KIND_CUDA: _ClassVar[DeviceKind]

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_TRAINER: _ClassVar[Role]
    ROLE_ROLLOUT: _ClassVar[Role]
    ROLE_ENVHOST: _ClassVar[Role]
    ROLE_COORDINATOR: _ClassVar[Role]
    ROLE_GATEWAY: _ClassVar[Role]
DEVICE_KIND_UNSPECIFIED: DeviceKind
DEVICE_KIND_CPU: DeviceKind
DEVICE_KIND_CUDA: DeviceKind
ROLE_UNSPECIFIED: Role
ROLE_TRAINER: Role
ROLE_ROLLOUT: Role
ROLE_ENVHOST: Role
ROLE_COORDINATOR: Role
ROLE_GATEWAY: Role

class Device(_message.Message):
    __slots__ = ("device_id", "kind", "memory_bytes", "name", "shares")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHARES_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    kind: DeviceKind
    memory_bytes: int
    name: str
    shares: int
    def __init__(self, device_id: _Optional[str] = ..., kind: _Optional[_Union[DeviceKind, str]] = ..., memory_bytes: _Optional[int] = ..., name: _Optional[str] = ..., shares: _Optional[int] = ...) -> None: ...

class ResourceRequest(_message.Message):
    __slots__ = ("role", "device_count", "device_kind", "min_memory_bytes", "dedicated_device")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    MIN_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEDICATED_DEVICE_FIELD_NUMBER: _ClassVar[int]
    role: Role
    device_count: int
    device_kind: DeviceKind
    min_memory_bytes: int
    dedicated_device: bool
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., device_count: _Optional[int] = ..., device_kind: _Optional[_Union[DeviceKind, str]] = ..., min_memory_bytes: _Optional[int] = ..., dedicated_device: _Optional[bool] = ...) -> None: ...

class LeaseContext(_message.Message):
    __slots__ = ("job_id", "lease_id", "fencing_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    lease_id: str
    fencing_token: int
    def __init__(self, job_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...
