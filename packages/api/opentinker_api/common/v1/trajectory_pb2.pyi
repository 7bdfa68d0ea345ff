from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_REASON_UNSPECIFIED: _ClassVar[StopReason]
    STOP_REASON_DONE: _ClassVar[StopReason]
    STOP_REASON_MAX_TURNS: _ClassVar[StopReason]
    STOP_REASON_MAX_TURN_TOKENS: _ClassVar[StopReason]
    STOP_REASON_MAX_TOTAL_TOKENS: _ClassVar[StopReason]
    STOP_REASON_CONTEXT_LENGTH: _ClassVar[StopReason]
    STOP_REASON_TIMEOUT: _ClassVar[StopReason]
    STOP_REASON_ENV_ERROR: _ClassVar[StopReason]
    STOP_REASON_CANCELLED: _ClassVar[StopReason]

class AgentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_STATE_UNSPECIFIED: _ClassVar[AgentState]
    AGENT_STATE_PENDING: _ClassVar[AgentState]
    AGENT_STATE_GENERATING: _ClassVar[AgentState]
    AGENT_STATE_INTERACTING: _ClassVar[AgentState]
    AGENT_STATE_TERMINATED: _ClassVar[AgentState]
STOP_REASON_UNSPECIFIED: StopReason
STOP_REASON_DONE: StopReason
STOP_REASON_MAX_TURNS: StopReason
STOP_REASON_MAX_TURN_TOKENS: StopReason
STOP_REASON_MAX_TOTAL_TOKENS: StopReason
STOP_REASON_CONTEXT_LENGTH: StopReason
STOP_REASON_TIMEOUT: StopReason
STOP_REASON_ENV_ERROR: StopReason
STOP_REASON_CANCELLED: StopReason
AGENT_STATE_UNSPECIFIED: AgentState
AGENT_STATE_PENDING: AgentState
AGENT_STATE_GENERATING: AgentState
AGENT_STATE_INTERACTING: AgentState
AGENT_STATE_TERMINATED: AgentState

class Turn(_message.Message):
    __slots__ = ("turn_index", "action_start", "action_end", "observation_start", "observation_end", "action_text", "observation_text", "reward", "policy_version", "info", "truncated")
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTION_START_FIELD_NUMBER: _ClassVar[int]
    ACTION_END_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_START_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_END_FIELD_NUMBER: _ClassVar[int]
    ACTION_TEXT_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_TEXT_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    turn_index: int
    action_start: int
    action_end: int
    observation_start: int
    observation_end: int
    action_text: str
    observation_text: str
    reward: float
    policy_version: int
    info: _struct_pb2.Struct
    truncated: bool
    def __init__(self, turn_index: _Optional[int] = ..., action_start: _Optional[int] = ..., action_end: _Optional[int] = ..., observation_start: _Optional[int] = ..., observation_end: _Optional[int] = ..., action_text: _Optional[str] = ..., observation_text: _Optional[str] = ..., reward: _Optional[float] = ..., policy_version: _Optional[int] = ..., info: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class Trajectory(_message.Message):
    __slots__ = ("trajectory_id", "group_id", "episode_index", "token_ids", "loss_mask", "sampling_logprobs", "prompt_length", "turns", "total_reward", "stop_reason", "policy_version", "env_error", "metrics", "agent_id", "prompt_text", "token_rewards", "match_id", "seat", "outcome")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TRAJECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    EPISODE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOSS_MASK_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_REWARD_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENV_ERROR_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_REWARDS_FIELD_NUMBER: _ClassVar[int]
    MATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    trajectory_id: str
    group_id: str
    episode_index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    loss_mask: _containers.RepeatedScalarFieldContainer[int]
    sampling_logprobs: _containers.RepeatedScalarFieldContainer[float]
    prompt_length: int
    turns: _containers.RepeatedCompositeFieldContainer[Turn]
    total_reward: float
    stop_reason: StopReason
    policy_version: int
    env_error: str
    metrics: _containers.ScalarMap[str, float]
    agent_id: str
    prompt_text: str
    token_rewards: _containers.RepeatedScalarFieldContainer[float]
    match_id: str
    seat: str
    outcome: str
    def __init__(self, trajectory_id: _Optional[str] = ..., group_id: _Optional[str] = ..., episode_index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., loss_mask: _Optional[_Iterable[int]] = ..., sampling_logprobs: _Optional[_Iterable[float]] = ..., prompt_length: _Optional[int] = ..., turns: _Optional[_Iterable[_Union[Turn, _Mapping]]] = ..., total_reward: _Optional[float] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., policy_version: _Optional[int] = ..., env_error: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., agent_id: _Optional[str] = ..., prompt_text: _Optional[str] = ..., token_rewards: _Optional[_Iterable[float]] = ..., match_id: _Optional[str] = ..., seat: _Optional[str] = ..., outcome: _Optional[str] = ...) -> None: ...
