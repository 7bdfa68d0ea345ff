from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnvironmentReference(_message.Message):
    __slots__ = ("envhost_address", "env_name", "config", "envhost")
    ENVHOST_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ENV_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ENVHOST_FIELD_NUMBER: _ClassVar[int]
    envhost_address: str
    env_name: str
    config: _struct_pb2.Struct
    envhost: str
    def __init__(self, envhost_address: _Optional[str] = ..., env_name: _Optional[str] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., envhost: _Optional[str] = ...) -> None: ...
