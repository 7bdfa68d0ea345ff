import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from opentinker_api.common.v1 import algorithm_pb2 as _algorithm_pb2
from opentinker_api.common.v1 import environment_pb2 as _environment_pb2
from opentinker_api.common.v1 import model_pb2 as _model_pb2
from opentinker_api.common.v1 import progress_pb2 as _progress_pb2
from opentinker_api.common.v1 import resources_pb2 as _resources_pb2
from opentinker_api.common.v1 import sampling_pb2 as _sampling_pb2
from opentinker_api.common.v1 import trajectory_pb2 as _trajectory_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_TYPE_UNSPECIFIED: _ClassVar[JobType]
    JOB_TYPE_RL: _ClassVar[JobType]
    JOB_TYPE_SFT: _ClassVar[JobType]
    JOB_TYPE_INFERENCE: _ClassVar[JobType]
    JOB_TYPE_SESSION: _ClassVar[JobType]
JOB_TYPE_UNSPECIFIED: JobType
JOB_TYPE_RL: JobType
JOB_TYPE_SFT: JobType
JOB_TYPE_INFERENCE: JobType
JOB_TYPE_SESSION: JobType

class JobSpec(_message.Message):
    __slots__ = ("type", "display_name", "policy", "agents", "environment", "training", "resources", "priority", "dataset", "inference", "labels", "multi_agent")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MULTI_AGENT_FIELD_NUMBER: _ClassVar[int]
    ASYNC_FIELD_NUMBER: _ClassVar[int]
    type: JobType
    display_name: str
    policy: AgentSpec
    agents: _containers.RepeatedCompositeFieldContainer[AgentSpec]
    environment: _environment_pb2.EnvironmentReference
    training: TrainingConfig
    resources: _containers.RepeatedCompositeFieldContainer[_resources_pb2.ResourceRequest]
    priority: int
    dataset: DatasetReference
    inference: InferenceConfig
    labels: _containers.ScalarMap[str, str]
    multi_agent: MultiAgentConfig
    def __init__(self, type: _Optional[_Union[JobType, str]] = ..., display_name: _Optional[str] = ..., policy: _Optional[_Union[AgentSpec, _Mapping]] = ..., agents: _Optional[_Iterable[_Union[AgentSpec, _Mapping]]] = ..., environment: _Optional[_Union[_environment_pb2.EnvironmentReference, _Mapping]] = ..., training: _Optional[_Union[TrainingConfig, _Mapping]] = ..., resources: _Optional[_Iterable[_Union[_resources_pb2.ResourceRequest, _Mapping]]] = ..., priority: _Optional[int] = ..., dataset: _Optional[_Union[DatasetReference, _Mapping]] = ..., inference: _Optional[_Union[InferenceConfig, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., multi_agent: _Optional[_Union[MultiAgentConfig, _Mapping]] = ..., **kwargs) -> None: ...

class AsyncConfig(_message.Message):
    __slots__ = ("max_staleness", "in_flight")
    class InFlight(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        IN_FLIGHT_UNSPECIFIED: _ClassVar[AsyncConfig.InFlight]
        IN_FLIGHT_FINISH_ON_OLD_WEIGHTS: _ClassVar[AsyncConfig.InFlight]
        IN_FLIGHT_SWAP_WEIGHTS: _ClassVar[AsyncConfig.InFlight]
    IN_FLIGHT_UNSPECIFIED: AsyncConfig.InFlight
    IN_FLIGHT_FINISH_ON_OLD_WEIGHTS: AsyncConfig.InFlight
    IN_FLIGHT_SWAP_WEIGHTS: AsyncConfig.InFlight
    MAX_STALENESS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    max_staleness: int
    in_flight: AsyncConfig.InFlight
    def __init__(self, max_staleness: _Optional[int] = ..., in_flight: _Optional[_Union[AsyncConfig.InFlight, str]] = ...) -> None: ...

class MultiAgentConfig(_message.Message):
    __slots__ = ("pairing", "eval_environment", "elo_k", "barrier_timeout_seconds")
    class Pairing(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PAIRING_UNSPECIFIED: _ClassVar[MultiAgentConfig.Pairing]
        PAIRING_FIXED_SEATS: _ClassVar[MultiAgentConfig.Pairing]
        PAIRING_ROUND_ROBIN: _ClassVar[MultiAgentConfig.Pairing]
    PAIRING_UNSPECIFIED: MultiAgentConfig.Pairing
    PAIRING_FIXED_SEATS: MultiAgentConfig.Pairing
    PAIRING_ROUND_ROBIN: MultiAgentConfig.Pairing
    PAIRING_FIELD_NUMBER: _ClassVar[int]
    EVAL_ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ELO_K_FIELD_NUMBER: _ClassVar[int]
    BARRIER_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    pairing: MultiAgentConfig.Pairing
    eval_environment: _environment_pb2.EnvironmentReference
    elo_k: float
    barrier_timeout_seconds: float
    def __init__(self, pairing: _Optional[_Union[MultiAgentConfig.Pairing, str]] = ..., eval_environment: _Optional[_Union[_environment_pb2.EnvironmentReference, _Mapping]] = ..., elo_k: _Optional[float] = ..., barrier_timeout_seconds: _Optional[float] = ...) -> None: ...

class AgentSpec(_message.Message):
    __slots__ = ("agent_id", "model", "adaptation", "algorithm", "sampling", "limits", "frozen")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    FROZEN_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    model: _model_pb2.ModelReference
    adaptation: _model_pb2.Adaptation
    algorithm: _algorithm_pb2.Algorithm
    sampling: _sampling_pb2.SamplingParams
    limits: _sampling_pb2.AgentLoopLimits
    frozen: bool
    def __init__(self, agent_id: _Optional[str] = ..., model: _Optional[_Union[_model_pb2.ModelReference, _Mapping]] = ..., adaptation: _Optional[_Union[_model_pb2.Adaptation, _Mapping]] = ..., algorithm: _Optional[_Union[_algorithm_pb2.Algorithm, _Mapping]] = ..., sampling: _Optional[_Union[_sampling_pb2.SamplingParams, _Mapping]] = ..., limits: _Optional[_Union[_sampling_pb2.AgentLoopLimits, _Mapping]] = ..., frozen: _Optional[bool] = ...) -> None: ...

class TrainingConfig(_message.Message):
    __slots__ = ("total_steps", "batch_size", "group_size", "max_tokens_per_micro_batch", "eval_every_steps", "eval_episodes", "checkpoint_every_steps", "max_retries", "seed", "max_duration", "target_loss")
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_MICRO_BATCH_FIELD_NUMBER: _ClassVar[int]
    EVAL_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    EVAL_EPISODES_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_DURATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_LOSS_FIELD_NUMBER: _ClassVar[int]
    total_steps: int
    batch_size: int
    group_size: int
    max_tokens_per_micro_batch: int
    eval_every_steps: int
    eval_episodes: int
    checkpoint_every_steps: int
    max_retries: int
    seed: int
    max_duration: _duration_pb2.Duration
    target_loss: float
    def __init__(self, total_steps: _Optional[int] = ..., batch_size: _Optional[int] = ..., group_size: _Optional[int] = ..., max_tokens_per_micro_batch: _Optional[int] = ..., eval_every_steps: _Optional[int] = ..., eval_episodes: _Optional[int] = ..., checkpoint_every_steps: _Optional[int] = ..., max_retries: _Optional[int] = ..., seed: _Optional[int] = ..., max_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., target_loss: _Optional[float] = ...) -> None: ...

class DatasetReference(_message.Message):
    __slots__ = ("path", "messages_field", "options")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    path: str
    messages_field: str
    options: _struct_pb2.Struct
    def __init__(self, path: _Optional[str] = ..., messages_field: _Optional[str] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class InferenceConfig(_message.Message):
    __slots__ = ("num_episodes", "output_path")
    NUM_EPISODES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PATH_FIELD_NUMBER: _ClassVar[int]
    num_episodes: int
    output_path: str
    def __init__(self, num_episodes: _Optional[int] = ..., output_path: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "tenant_id", "spec", "state", "create_time", "update_time", "start_time", "end_time", "progress", "status_message", "queue_position", "attempt", "assignments", "last_event_sequence", "cancel_requested", "resume_from", "retries_left")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Job.State]
        STATE_QUEUED: _ClassVar[Job.State]
        STATE_ALLOCATING: _ClassVar[Job.State]
        STATE_RUNNING: _ClassVar[Job.State]
        STATE_SUCCEEDED: _ClassVar[Job.State]
        STATE_FAILED: _ClassVar[Job.State]
        STATE_CANCELLED: _ClassVar[Job.State]
    STATE_UNSPECIFIED: Job.State
    STATE_QUEUED: Job.State
    STATE_ALLOCATING: Job.State
    STATE_RUNNING: Job.State
    STATE_SUCCEEDED: Job.State
    STATE_FAILED: Job.State
    STATE_CANCELLED: Job.State
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STATUS_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_FIELD_NUMBER: _ClassVar[int]
    RETRIES_LEFT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    tenant_id: str
    spec: JobSpec
    state: Job.State
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    progress: _progress_pb2.JobProgress
    status_message: str
    queue_position: int
    attempt: int
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    last_event_sequence: int
    cancel_requested: bool
    resume_from: CheckpointSaved
    retries_left: int
    def __init__(self, job_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[Job.State, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., progress: _Optional[_Union[_progress_pb2.JobProgress, _Mapping]] = ..., status_message: _Optional[str] = ..., queue_position: _Optional[int] = ..., attempt: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., last_event_sequence: _Optional[int] = ..., cancel_requested: _Optional[bool] = ..., resume_from: _Optional[_Union[CheckpointSaved, _Mapping]] = ..., retries_left: _Optional[int] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("role", "worker_id", "address", "device_ids", "lease", "job_token")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    JOB_TOKEN_FIELD_NUMBER: _ClassVar[int]
    role: _resources_pb2.Role
    worker_id: str
    address: str
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    lease: _resources_pb2.LeaseContext
    job_token: str
    def __init__(self, role: _Optional[_Union[_resources_pb2.Role, str]] = ..., worker_id: _Optional[str] = ..., address: _Optional[str] = ..., device_ids: _Optional[_Iterable[str]] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., job_token: _Optional[str] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("job_id", "sequence", "time", "state_changed", "metrics", "log", "progress", "checkpoint", "worker_lost", "samples")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    WORKER_LOST_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    sequence: int
    time: _timestamp_pb2.Timestamp
    state_changed: StateChanged
    metrics: MetricsReported
    log: LogLine
    progress: ProgressUpdated
    checkpoint: CheckpointSaved
    worker_lost: WorkerLost
    samples: SamplesReported
    def __init__(self, job_id: _Optional[str] = ..., sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state_changed: _Optional[_Union[StateChanged, _Mapping]] = ..., metrics: _Optional[_Union[MetricsReported, _Mapping]] = ..., log: _Optional[_Union[LogLine, _Mapping]] = ..., progress: _Optional[_Union[ProgressUpdated, _Mapping]] = ..., checkpoint: _Optional[_Union[CheckpointSaved, _Mapping]] = ..., worker_lost: _Optional[_Union[WorkerLost, _Mapping]] = ..., samples: _Optional[_Union[SamplesReported, _Mapping]] = ...) -> None: ...

class StateChanged(_message.Message):
    __slots__ = ("from_state", "to_state", "reason")
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    from_state: Job.State
    to_state: Job.State
    reason: str
    def __init__(self, from_state: _Optional[_Union[Job.State, str]] = ..., to_state: _Optional[_Union[Job.State, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class MetricsReported(_message.Message):
    __slots__ = ("step", "agent_id", "values")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    step: int
    agent_id: str
    values: _containers.ScalarMap[str, float]
    def __init__(self, step: _Optional[int] = ..., agent_id: _Optional[str] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("level", "source", "message")
    class Level(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        LEVEL_UNSPECIFIED: _ClassVar[LogLine.Level]
        LEVEL_DEBUG: _ClassVar[LogLine.Level]
        LEVEL_INFO: _ClassVar[LogLine.Level]
        LEVEL_WARNING: _ClassVar[LogLine.Level]
        LEVEL_ERROR: _ClassVar[LogLine.Level]
    LEVEL_UNSPECIFIED: LogLine.Level
    LEVEL_DEBUG: LogLine.Level
    LEVEL_INFO: LogLine.Level
    LEVEL_WARNING: LogLine.Level
    LEVEL_ERROR: LogLine.Level
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    level: LogLine.Level
    source: str
    message: str
    def __init__(self, level: _Optional[_Union[LogLine.Level, str]] = ..., source: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ProgressUpdated(_message.Message):
    __slots__ = ("progress",)
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    progress: _progress_pb2.JobProgress
    def __init__(self, progress: _Optional[_Union[_progress_pb2.JobProgress, _Mapping]] = ...) -> None: ...

class CheckpointSaved(_message.Message):
    __slots__ = ("checkpoint_id", "step", "agent_checkpoint_ids", "driver_state")
    class AgentCheckpointIdsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class DriverStateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    AGENT_CHECKPOINT_IDS_FIELD_NUMBER: _ClassVar[int]
    DRIVER_STATE_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    step: int
    agent_checkpoint_ids: _containers.ScalarMap[str, str]
    driver_state: _containers.ScalarMap[str, float]
    def __init__(self, checkpoint_id: _Optional[str] = ..., step: _Optional[int] = ..., agent_checkpoint_ids: _Optional[_Mapping[str, str]] = ..., driver_state: _Optional[_Mapping[str, float]] = ...) -> None: ...

class WorkerLost(_message.Message):
    __slots__ = ("worker_id", "role", "reason")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    role: _resources_pb2.Role
    reason: str
    def __init__(self, worker_id: _Optional[str] = ..., role: _Optional[_Union[_resources_pb2.Role, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class SamplesReported(_message.Message):
    __slots__ = ("step", "split", "agent_id", "samples")
    STEP_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    step: int
    split: str
    agent_id: str
    samples: _containers.RepeatedCompositeFieldContainer[EpisodeSample]
    def __init__(self, step: _Optional[int] = ..., split: _Optional[str] = ..., agent_id: _Optional[str] = ..., samples: _Optional[_Iterable[_Union[EpisodeSample, _Mapping]]] = ...) -> None: ...

class EpisodeSample(_message.Message):
    __slots__ = ("group_id", "prompt", "turns", "reward", "stop_reason", "correct")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    CORRECT_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    prompt: str
    turns: _containers.RepeatedCompositeFieldContainer[SampleTurn]
    reward: float
    stop_reason: _trajectory_pb2.StopReason
    correct: bool
    def __init__(self, group_id: _Optional[str] = ..., prompt: _Optional[str] = ..., turns: _Optional[_Iterable[_Union[SampleTurn, _Mapping]]] = ..., reward: _Optional[float] = ..., stop_reason: _Optional[_Union[_trajectory_pb2.StopReason, str]] = ..., correct: _Optional[bool] = ...) -> None: ...

class SampleTurn(_message.Message):
    __slots__ = ("action", "observation", "reward", "truncated")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    action: str
    observation: str
    reward: float
    truncated: bool
    def __init__(self, action: _Optional[str] = ..., observation: _Optional[str] = ..., reward: _Optional[float] = ..., truncated: _Optional[bool] = ...) -> None: ...
