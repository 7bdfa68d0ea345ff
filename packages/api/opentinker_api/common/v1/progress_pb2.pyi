import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_SETUP: _ClassVar[Phase]
    PHASE_ROLLOUT: _ClassVar[Phase]
    PHASE_UPDATE: _ClassVar[Phase]
    PHASE_WEIGHT_SYNC: _ClassVar[Phase]
    PHASE_EVAL: _ClassVar[Phase]
    PHASE_CHECKPOINT: _ClassVar[Phase]
    PHASE_FINISHED: _ClassVar[Phase]
PHASE_UNSPECIFIED: Phase
PHASE_SETUP: Phase
PHASE_ROLLOUT: Phase
PHASE_UPDATE: Phase
PHASE_WEIGHT_SYNC: Phase
PHASE_EVAL: Phase
PHASE_CHECKPOINT: Phase
PHASE_FINISHED: Phase

class JobProgress(_message.Message):
    __slots__ = ("phase", "step", "total_steps", "phase_done", "phase_total", "last_checkpoint_id", "update_time", "latest_metrics")
    class LatestMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    PHASE_DONE_FIELD_NUMBER: _ClassVar[int]
    PHASE_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LATEST_METRICS_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    step: int
    total_steps: int
    phase_done: int
    phase_total: int
    last_checkpoint_id: str
    update_time: _timestamp_pb2.Timestamp
    latest_metrics: _containers.ScalarMap[str, float]
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., step: _Optional[int] = ..., total_steps: _Optional[int] = ..., phase_done: _Optional[int] = ..., phase_total: _Optional[int] = ..., last_checkpoint_id: _Optional[str] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., latest_metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...
