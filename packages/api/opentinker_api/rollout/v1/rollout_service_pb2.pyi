from google.protobuf import struct_pb2 as _struct_pb2
from opentinker_api.common.v1 import datum_pb2 as _datum_pb2
from opentinker_api.common.v1 import environment_pb2 as _environment_pb2
from opentinker_api.common.v1 import errors_pb2 as _errors_pb2
from opentinker_api.common.v1 import model_pb2 as _model_pb2
from opentinker_api.common.v1 import resources_pb2 as _resources_pb2
from opentinker_api.common.v1 import sampling_pb2 as _sampling_pb2
from opentinker_api.common.v1 import trajectory_pb2 as _trajectory_pb2
from opentinker_api.common.v1 import weights_pb2 as _weights_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_UNSPECIFIED: _ClassVar[Engine]
    ENGINE_TRANSFORMERS: _ClassVar[Engine]
    ENGINE_VLLM: _ClassVar[Engine]
ENGINE_UNSPECIFIED: Engine
ENGINE_TRANSFORMERS: Engine
ENGINE_VLLM: Engine

class Policy(_message.Message):
    __slots__ = ("policy_id", "job_id", "model_info", "policy_version", "engine")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_INFO_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    job_id: str
    model_info: _model_pb2.ModelInfo
    policy_version: int
    engine: Engine
    def __init__(self, policy_id: _Optional[str] = ..., job_id: _Optional[str] = ..., model_info: _Optional[_Union[_model_pb2.ModelInfo, _Mapping]] = ..., policy_version: _Optional[int] = ..., engine: _Optional[_Union[Engine, str]] = ...) -> None: ...

class LoadModelRequest(_message.Message):
    __slots__ = ("request_id", "lease", "model", "adaptation", "engine", "max_batch_size")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease: _resources_pb2.LeaseContext
    model: _model_pb2.ModelReference
    adaptation: _model_pb2.Adaptation
    engine: Engine
    max_batch_size: int
    def __init__(self, request_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., model: _Optional[_Union[_model_pb2.ModelReference, _Mapping]] = ..., adaptation: _Optional[_Union[_model_pb2.Adaptation, _Mapping]] = ..., engine: _Optional[_Union[Engine, str]] = ..., max_batch_size: _Optional[int] = ...) -> None: ...

class LoadModelResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class UnloadModelRequest(_message.Message):
    __slots__ = ("policy_id", "lease")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    lease: _resources_pb2.LeaseContext
    def __init__(self, policy_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ...) -> None: ...

class UnloadModelResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class UpdateWeightsRequest(_message.Message):
    __slots__ = ("target", "header", "chunk")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    target: UpdateWeightsTarget
    header: _weights_pb2.WeightsHeader
    chunk: _weights_pb2.WeightsChunk
    def __init__(self, target: _Optional[_Union[UpdateWeightsTarget, _Mapping]] = ..., header: _Optional[_Union[_weights_pb2.WeightsHeader, _Mapping]] = ..., chunk: _Optional[_Union[_weights_pb2.WeightsChunk, _Mapping]] = ...) -> None: ...

class UpdateWeightsTarget(_message.Message):
    __slots__ = ("policy_id", "lease")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    lease: _resources_pb2.LeaseContext
    def __init__(self, policy_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ...) -> None: ...

class UpdateWeightsResponse(_message.Message):
    __slots__ = ("policy", "bytes_received")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    bytes_received: int
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ..., bytes_received: _Optional[int] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class Prompt(_message.Message):
    __slots__ = ("tokens", "messages")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    tokens: _datum_pb2.TokenSequence
    messages: ChatMessages
    def __init__(self, tokens: _Optional[_Union[_datum_pb2.TokenSequence, _Mapping]] = ..., messages: _Optional[_Union[ChatMessages, _Mapping]] = ...) -> None: ...

class ChatMessages(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ...) -> None: ...

class SampleRequest(_message.Message):
    __slots__ = ("policy_id", "prompts", "sampling", "prompt_logprobs")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    prompts: _containers.RepeatedCompositeFieldContainer[Prompt]
    sampling: _sampling_pb2.SamplingParams
    prompt_logprobs: bool
    def __init__(self, policy_id: _Optional[str] = ..., prompts: _Optional[_Iterable[_Union[Prompt, _Mapping]]] = ..., sampling: _Optional[_Union[_sampling_pb2.SamplingParams, _Mapping]] = ..., prompt_logprobs: _Optional[bool] = ...) -> None: ...

class Completion(_message.Message):
    __slots__ = ("tokens", "logprobs", "text", "stop_reason", "policy_version")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    text: str
    stop_reason: _trajectory_pb2.StopReason
    policy_version: int
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., text: _Optional[str] = ..., stop_reason: _Optional[_Union[_trajectory_pb2.StopReason, str]] = ..., policy_version: _Optional[int] = ...) -> None: ...

class PromptCompletions(_message.Message):
    __slots__ = ("completions", "prompt_length", "prompt_logprobs")
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    completions: _containers.RepeatedCompositeFieldContainer[Completion]
    prompt_length: int
    prompt_logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, completions: _Optional[_Iterable[_Union[Completion, _Mapping]]] = ..., prompt_length: _Optional[int] = ..., prompt_logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class SampleResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PromptCompletions]
    def __init__(self, results: _Optional[_Iterable[_Union[PromptCompletions, _Mapping]]] = ...) -> None: ...

class EpisodeSpec(_message.Message):
    __slots__ = ("group_id", "reset_kwargs", "seed", "match_id", "seat")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    RESET_KWARGS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEAT_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    reset_kwargs: _struct_pb2.Struct
    seed: int
    match_id: str
    seat: str
    def __init__(self, group_id: _Optional[str] = ..., reset_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., seed: _Optional[int] = ..., match_id: _Optional[str] = ..., seat: _Optional[str] = ...) -> None: ...

class RunEpisodesRequest(_message.Message):
    __slots__ = ("policy_id", "lease", "environment", "episodes", "group_size", "sampling", "limits", "coordinator_address", "agent_id")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    lease: _resources_pb2.LeaseContext
    environment: _environment_pb2.EnvironmentReference
    episodes: _containers.RepeatedCompositeFieldContainer[EpisodeSpec]
    group_size: int
    sampling: _sampling_pb2.SamplingParams
    limits: _sampling_pb2.AgentLoopLimits
    coordinator_address: str
    agent_id: str
    def __init__(self, policy_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., environment: _Optional[_Union[_environment_pb2.EnvironmentReference, _Mapping]] = ..., episodes: _Optional[_Iterable[_Union[EpisodeSpec, _Mapping]]] = ..., group_size: _Optional[int] = ..., sampling: _Optional[_Union[_sampling_pb2.SamplingParams, _Mapping]] = ..., limits: _Optional[_Union[_sampling_pb2.AgentLoopLimits, _Mapping]] = ..., coordinator_address: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class RunEpisodesResponse(_message.Message):
    __slots__ = ("trajectory", "progress", "error")
    TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    trajectory: _trajectory_pb2.Trajectory
    progress: EpisodeProgress
    error: _errors_pb2.ErrorDetail
    def __init__(self, trajectory: _Optional[_Union[_trajectory_pb2.Trajectory, _Mapping]] = ..., progress: _Optional[_Union[EpisodeProgress, _Mapping]] = ..., error: _Optional[_Union[_errors_pb2.ErrorDetail, _Mapping]] = ...) -> None: ...

class EpisodeProgress(_message.Message):
    __slots__ = ("episodes_done", "episodes_total", "tokens_per_second", "episodes_waiting_on_environment")
    EPISODES_DONE_FIELD_NUMBER: _ClassVar[int]
    EPISODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    EPISODES_WAITING_ON_ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    episodes_done: int
    episodes_total: int
    tokens_per_second: float
    episodes_waiting_on_environment: int
    def __init__(self, episodes_done: _Optional[int] = ..., episodes_total: _Optional[int] = ..., tokens_per_second: _Optional[float] = ..., episodes_waiting_on_environment: _Optional[int] = ...) -> None: ...
