import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TruncatedActions(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRUNCATED_ACTIONS_UNSPECIFIED: _ClassVar[TruncatedActions]
    TRUNCATED_ACTIONS_JUDGED: _ClassVar[TruncatedActions]
    TRUNCATED_ACTIONS_END_EPISODE: _ClassVar[TruncatedActions]
TRUNCATED_ACTIONS_UNSPECIFIED: TruncatedActions
TRUNCATED_ACTIONS_JUDGED: TruncatedActions
TRUNCATED_ACTIONS_END_EPISODE: TruncatedActions

class SamplingParams(_message.Message):
    __slots__ = ("max_new_tokens", "temperature", "top_p", "top_k", "stop", "stop_token_ids", "n", "seed")
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    n: int
    seed: int
    def __init__(self, max_new_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., n: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...

class AgentLoopLimits(_message.Message):
    __slots__ = ("max_turns", "max_new_tokens_per_turn", "max_total_tokens", "episode_timeout", "truncated_actions", "truncation_penalty")
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_PER_TURN_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EPISODE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    max_turns: int
    max_new_tokens_per_turn: int
    max_total_tokens: int
    episode_timeout: _duration_pb2.Duration
    truncated_actions: TruncatedActions
    truncation_penalty: float
    def __init__(self, max_turns: _Optional[int] = ..., max_new_tokens_per_turn: _Optional[int] = ..., max_total_tokens: _Optional[int] = ..., episode_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., truncated_actions: _Optional[_Union[TruncatedActions, str]] = ..., truncation_penalty: _Optional[float] = ...) -> None: ...
