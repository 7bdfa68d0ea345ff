from google.protobuf import struct_pb2 as _struct_pb2
from opentinker_api.common.v1 import errors_pb2 as _errors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Environment(_message.Message):
    __slots__ = ("name", "description", "source", "multi_turn", "seats", "default_config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    MULTI_TURN_FIELD_NUMBER: _ClassVar[int]
    SEATS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    source: str
    multi_turn: bool
    seats: _containers.RepeatedScalarFieldContainer[str]
    default_config: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., source: _Optional[str] = ..., multi_turn: _Optional[bool] = ..., seats: _Optional[_Iterable[str]] = ..., default_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ListEnvironmentsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEnvironmentsResponse(_message.Message):
    __slots__ = ("environments", "next_page_token")
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    environments: _containers.RepeatedCompositeFieldContainer[Environment]
    next_page_token: str
    def __init__(self, environments: _Optional[_Iterable[_Union[Environment, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("env_name", "config", "request_id", "job_id", "close_with_stream")
    ENV_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CLOSE_WITH_STREAM_FIELD_NUMBER: _ClassVar[int]
    env_name: str
    config: _struct_pb2.Struct
    request_id: str
    job_id: str
    close_with_stream: bool
    def __init__(self, env_name: _Optional[str] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ..., job_id: _Optional[str] = ..., close_with_stream: _Optional[bool] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id", "environment")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    environment: Environment
    def __init__(self, session_id: _Optional[str] = ..., environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("session_id", "kwargs", "seed")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    KWARGS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    kwargs: _struct_pb2.Struct
    seed: int
    def __init__(self, session_id: _Optional[str] = ..., kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., seed: _Optional[int] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ("system_prompt", "initial_user_message", "observation", "info")
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    INITIAL_USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    system_prompt: str
    initial_user_message: str
    observation: str
    info: _struct_pb2.Struct
    def __init__(self, system_prompt: _Optional[str] = ..., initial_user_message: _Optional[str] = ..., observation: _Optional[str] = ..., info: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("session_id", "action", "seat", "truncated")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    action: str
    seat: str
    truncated: bool
    def __init__(self, session_id: _Optional[str] = ..., action: _Optional[str] = ..., seat: _Optional[str] = ..., truncated: _Optional[bool] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("observation", "reward", "done", "info")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    observation: str
    reward: float
    done: bool
    info: _struct_pb2.Struct
    def __init__(self, observation: _Optional[str] = ..., reward: _Optional[float] = ..., done: _Optional[bool] = ..., info: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("steps",)
    STEPS_FIELD_NUMBER: _ClassVar[int]
    steps: int
    def __init__(self, steps: _Optional[int] = ...) -> None: ...

class InteractRequest(_message.Message):
    __slots__ = ("sequence", "open_session", "reset", "step", "close_session")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OPEN_SESSION_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SESSION_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    open_session: OpenSessionRequest
    reset: ResetRequest
    step: StepRequest
    close_session: CloseSessionRequest
    def __init__(self, sequence: _Optional[int] = ..., open_session: _Optional[_Union[OpenSessionRequest, _Mapping]] = ..., reset: _Optional[_Union[ResetRequest, _Mapping]] = ..., step: _Optional[_Union[StepRequest, _Mapping]] = ..., close_session: _Optional[_Union[CloseSessionRequest, _Mapping]] = ...) -> None: ...

class InteractResponse(_message.Message):
    __slots__ = ("sequence", "open_session", "reset", "step", "close_session", "error")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OPEN_SESSION_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SESSION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    open_session: OpenSessionResponse
    reset: ResetResponse
    step: StepResponse
    close_session: CloseSessionResponse
    error: _errors_pb2.ErrorDetail
    def __init__(self, sequence: _Optional[int] = ..., open_session: _Optional[_Union[OpenSessionResponse, _Mapping]] = ..., reset: _Optional[_Union[ResetResponse, _Mapping]] = ..., step: _Optional[_Union[StepResponse, _Mapping]] = ..., close_session: _Optional[_Union[CloseSessionResponse, _Mapping]] = ..., error: _Optional[_Union[_errors_pb2.ErrorDetail, _Mapping]] = ...) -> None: ...
