from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_FIELD: _ClassVar[ErrorReason]
    ERROR_REASON_JOB_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_SESSION_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_DEVICE_LEASE_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_STALE_FENCING_TOKEN: _ClassVar[ErrorReason]
    ERROR_REASON_QUOTA_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_JOB_NOT_CANCELLABLE: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_YOUR_TURN: _ClassVar[ErrorReason]
    ERROR_REASON_ENVIRONMENT_FAILED: _ClassVar[ErrorReason]
    ERROR_REASON_ENVIRONMENT_TIMEOUT: _ClassVar[ErrorReason]
    ERROR_REASON_WEIGHTS_VERSION_CONFLICT: _ClassVar[ErrorReason]
    ERROR_REASON_WEIGHTS_CORRUPT: _ClassVar[ErrorReason]
    ERROR_REASON_REQUEST_ID_REUSED: _ClassVar[ErrorReason]
    ERROR_REASON_UNAUTHENTICATED: _ClassVar[ErrorReason]
    ERROR_REASON_MATCH_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_MATCH_FINISHED: _ClassVar[ErrorReason]
    ERROR_REASON_SEAT_TAKEN: _ClassVar[ErrorReason]
    ERROR_REASON_AGENT_LOST: _ClassVar[ErrorReason]
    ERROR_REASON_JOB_TOKEN_INVALID: _ClassVar[ErrorReason]
    ERROR_REASON_ADMIN_ONLY_FIELD: _ClassVar[ErrorReason]
    ERROR_REASON_ENVHOST_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_STREAM_LIMIT: _ClassVar[ErrorReason]
    ERROR_REASON_PATH_NOT_ALLOWED: _ClassVar[ErrorReason]
    ERROR_REASON_WEIGHTS_SHARED_FILE_UNAVAILABLE: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_INVALID_FIELD: ErrorReason
ERROR_REASON_JOB_NOT_FOUND: ErrorReason
ERROR_REASON_SESSION_NOT_FOUND: ErrorReason
ERROR_REASON_DEVICE_LEASE_UNAVAILABLE: ErrorReason
ERROR_REASON_STALE_FENCING_TOKEN: ErrorReason
ERROR_REASON_QUOTA_EXCEEDED: ErrorReason
ERROR_REASON_JOB_NOT_CANCELLABLE: ErrorReason
ERROR_REASON_NOT_YOUR_TURN: ErrorReason
ERROR_REASON_ENVIRONMENT_FAILED: ErrorReason
ERROR_REASON_ENVIRONMENT_TIMEOUT: ErrorReason
ERROR_REASON_WEIGHTS_VERSION_CONFLICT: ErrorReason
ERROR_REASON_WEIGHTS_CORRUPT: ErrorReason
ERROR_REASON_REQUEST_ID_REUSED: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_MATCH_NOT_FOUND: ErrorReason
ERROR_REASON_MATCH_FINISHED: ErrorReason
ERROR_REASON_SEAT_TAKEN: ErrorReason
ERROR_REASON_AGENT_LOST: ErrorReason
ERROR_REASON_JOB_TOKEN_INVALID: ErrorReason
ERROR_REASON_ADMIN_ONLY_FIELD: ErrorReason
ERROR_REASON_ENVHOST_NOT_FOUND: ErrorReason
ERROR_REASON_STREAM_LIMIT: ErrorReason
ERROR_REASON_PATH_NOT_ALLOWED: ErrorReason
ERROR_REASON_WEIGHTS_SHARED_FILE_UNAVAILABLE: ErrorReason

class ErrorDetail(_message.Message):
    __slots__ = ("code", "message", "reason", "traceback")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    reason: ErrorReason
    traceback: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., reason: _Optional[_Union[ErrorReason, str]] = ..., traceback: _Optional[str] = ...) -> None: ...
