import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from opentinker_api.common.v1 import environment_pb2 as _environment_pb2
from opentinker_api.common.v1 import progress_pb2 as _progress_pb2
from opentinker_api.common.v1 import resources_pb2 as _resources_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Run(_message.Message):
    __slots__ = ("job_id", "state", "progress", "agents", "message", "start_time")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Run.State]
        STATE_STARTING: _ClassVar[Run.State]
        STATE_RUNNING: _ClassVar[Run.State]
        STATE_PAUSED: _ClassVar[Run.State]
        STATE_STOPPING: _ClassVar[Run.State]
        STATE_FINISHED: _ClassVar[Run.State]
        STATE_FAILED: _ClassVar[Run.State]
    STATE_UNSPECIFIED: Run.State
    STATE_STARTING: Run.State
    STATE_RUNNING: Run.State
    STATE_PAUSED: Run.State
    STATE_STOPPING: Run.State
    STATE_FINISHED: Run.State
    STATE_FAILED: Run.State
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: Run.State
    progress: _progress_pb2.JobProgress
    agents: _containers.RepeatedCompositeFieldContainer[AgentProgress]
    message: str
    start_time: _timestamp_pb2.Timestamp
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[Run.State, str]] = ..., progress: _Optional[_Union[_progress_pb2.JobProgress, _Mapping]] = ..., agents: _Optional[_Iterable[_Union[AgentProgress, _Mapping]]] = ..., message: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AgentProgress(_message.Message):
    __slots__ = ("agent_id", "phase", "step", "policy_version")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    phase: _progress_pb2.Phase
    step: int
    policy_version: int
    def __init__(self, agent_id: _Optional[str] = ..., phase: _Optional[_Union[_progress_pb2.Phase, str]] = ..., step: _Optional[int] = ..., policy_version: _Optional[int] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("lease", "request_id")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    lease: _resources_pb2.LeaseContext
    request_id: str
    def __init__(self, lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class ResumeRunRequest(_message.Message):
    __slots__ = ("lease", "checkpoint_id", "request_id")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    lease: _resources_pb2.LeaseContext
    checkpoint_id: str
    request_id: str
    def __init__(self, lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., checkpoint_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ResumeRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class StopRunRequest(_message.Message):
    __slots__ = ("lease", "immediate", "reason")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    IMMEDIATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease: _resources_pb2.LeaseContext
    immediate: bool
    reason: str
    def __init__(self, lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., immediate: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class StopRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WatchRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class Match(_message.Message):
    __slots__ = ("match_id", "job_id", "environment", "seats", "agents_by_seat", "state", "turn_index", "current_seat", "rewards_by_seat", "history", "outcomes_by_seat", "message")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Match.State]
        STATE_WAITING_FOR_AGENTS: _ClassVar[Match.State]
        STATE_IN_PROGRESS: _ClassVar[Match.State]
        STATE_FINISHED: _ClassVar[Match.State]
        STATE_ABORTED: _ClassVar[Match.State]
    STATE_UNSPECIFIED: Match.State
    STATE_WAITING_FOR_AGENTS: Match.State
    STATE_IN_PROGRESS: Match.State
    STATE_FINISHED: Match.State
    STATE_ABORTED: Match.State
    class AgentsBySeatEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class RewardsBySeatEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class OutcomesBySeatEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MATCH_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SEATS_FIELD_NUMBER: _ClassVar[int]
    AGENTS_BY_SEAT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    CURRENT_SEAT_FIELD_NUMBER: _ClassVar[int]
    REWARDS_BY_SEAT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_BY_SEAT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    match_id: str
    job_id: str
    environment: _environment_pb2.EnvironmentReference
    seats: _containers.RepeatedScalarFieldContainer[str]
    agents_by_seat: _containers.ScalarMap[str, str]
    state: Match.State
    turn_index: int
    current_seat: str
    rewards_by_seat: _containers.ScalarMap[str, float]
    history: _containers.RepeatedCompositeFieldContainer[MatchAction]
    outcomes_by_seat: _containers.ScalarMap[str, str]
    message: str
    def __init__(self, match_id: _Optional[str] = ..., job_id: _Optional[str] = ..., environment: _Optional[_Union[_environment_pb2.EnvironmentReference, _Mapping]] = ..., seats: _Optional[_Iterable[str]] = ..., agents_by_seat: _Optional[_Mapping[str, str]] = ..., state: _Optional[_Union[Match.State, str]] = ..., turn_index: _Optional[int] = ..., current_seat: _Optional[str] = ..., rewards_by_seat: _Optional[_Mapping[str, float]] = ..., history: _Optional[_Iterable[_Union[MatchAction, _Mapping]]] = ..., outcomes_by_seat: _Optional[_Mapping[str, str]] = ..., message: _Optional[str] = ...) -> None: ...

class MatchAction(_message.Message):
    __slots__ = ("turn_index", "seat", "agent_id", "action", "reward", "accepted")
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    turn_index: int
    seat: str
    agent_id: str
    action: str
    reward: float
    accepted: bool
    def __init__(self, turn_index: _Optional[int] = ..., seat: _Optional[str] = ..., agent_id: _Optional[str] = ..., action: _Optional[str] = ..., reward: _Optional[float] = ..., accepted: _Optional[bool] = ...) -> None: ...

class OpenMatchRequest(_message.Message):
    __slots__ = ("job_id", "environment", "seats", "reset_kwargs", "seed", "request_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SEATS_FIELD_NUMBER: _ClassVar[int]
    RESET_KWARGS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    environment: _environment_pb2.EnvironmentReference
    seats: _containers.RepeatedScalarFieldContainer[str]
    reset_kwargs: _struct_pb2.Struct
    seed: int
    request_id: str
    def __init__(self, job_id: _Optional[str] = ..., environment: _Optional[_Union[_environment_pb2.EnvironmentReference, _Mapping]] = ..., seats: _Optional[_Iterable[str]] = ..., reset_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., seed: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class OpenMatchResponse(_message.Message):
    __slots__ = ("match",)
    MATCH_FIELD_NUMBER: _ClassVar[int]
    match: Match
    def __init__(self, match: _Optional[_Union[Match, _Mapping]] = ...) -> None: ...

class JoinMatchRequest(_message.Message):
    __slots__ = ("match_id", "agent_id", "seat")
    MATCH_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    match_id: str
    agent_id: str
    seat: str
    def __init__(self, match_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., seat: _Optional[str] = ...) -> None: ...

class JoinMatchResponse(_message.Message):
    __slots__ = ("match", "system_prompt", "initial_user_message")
    MATCH_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    INITIAL_USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    match: Match
    system_prompt: str
    initial_user_message: str
    def __init__(self, match: _Optional[_Union[Match, _Mapping]] = ..., system_prompt: _Optional[str] = ..., initial_user_message: _Optional[str] = ...) -> None: ...

class GetMatchRequest(_message.Message):
    __slots__ = ("match_id",)
    MATCH_ID_FIELD_NUMBER: _ClassVar[int]
    match_id: str
    def __init__(self, match_id: _Optional[str] = ...) -> None: ...

class GetMatchResponse(_message.Message):
    __slots__ = ("match",)
    MATCH_FIELD_NUMBER: _ClassVar[int]
    match: Match
    def __init__(self, match: _Optional[_Union[Match, _Mapping]] = ...) -> None: ...

class AwaitTurnRequest(_message.Message):
    __slots__ = ("match_id", "agent_id")
    MATCH_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    match_id: str
    agent_id: str
    def __init__(self, match_id: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class AwaitTurnResponse(_message.Message):
    __slots__ = ("turn_index", "observation", "match_finished", "reward", "outcome")
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    MATCH_FINISHED_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    turn_index: int
    observation: str
    match_finished: bool
    reward: float
    outcome: str
    def __init__(self, turn_index: _Optional[int] = ..., observation: _Optional[str] = ..., match_finished: _Optional[bool] = ..., reward: _Optional[float] = ..., outcome: _Optional[str] = ...) -> None: ...

class SubmitActionRequest(_message.Message):
    __slots__ = ("match_id", "agent_id", "turn_index", "action", "request_id")
    MATCH_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    match_id: str
    agent_id: str
    turn_index: int
    action: str
    request_id: str
    def __init__(self, match_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., turn_index: _Optional[int] = ..., action: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SubmitActionResponse(_message.Message):
    __slots__ = ("observation", "reward", "match_finished", "accepted", "outcome")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    MATCH_FINISHED_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    observation: str
    reward: float
    match_finished: bool
    accepted: bool
    outcome: str
    def __init__(self, observation: _Optional[str] = ..., reward: _Optional[float] = ..., match_finished: _Optional[bool] = ..., accepted: _Optional[bool] = ..., outcome: _Optional[str] = ...) -> None: ...

class LeaveMatchRequest(_message.Message):
    __slots__ = ("match_id", "agent_id")
    MATCH_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    match_id: str
    agent_id: str
    def __init__(self, match_id: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class LeaveMatchResponse(_message.Message):
    __slots__ = ("match",)
    MATCH_FIELD_NUMBER: _ClassVar[int]
    match: Match
    def __init__(self, match: _Optional[_Union[Match, _Mapping]] = ...) -> None: ...

class ArriveAtBarrierRequest(_message.Message):
    __slots__ = ("job_id", "agent_id", "phase", "step")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    agent_id: str
    phase: _progress_pb2.Phase
    step: int
    def __init__(self, job_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., phase: _Optional[_Union[_progress_pb2.Phase, str]] = ..., step: _Optional[int] = ...) -> None: ...

class ArriveAtBarrierResponse(_message.Message):
    __slots__ = ("agents_arrived", "agents_expected")
    AGENTS_ARRIVED_FIELD_NUMBER: _ClassVar[int]
    AGENTS_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    agents_arrived: int
    agents_expected: int
    def __init__(self, agents_arrived: _Optional[int] = ..., agents_expected: _Optional[int] = ...) -> None: ...
