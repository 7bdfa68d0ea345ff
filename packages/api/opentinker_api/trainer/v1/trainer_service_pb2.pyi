import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from opentinker_api.common.v1 import algorithm_pb2 as _algorithm_pb2
from opentinker_api.common.v1 import datum_pb2 as _datum_pb2
from opentinker_api.common.v1 import model_pb2 as _model_pb2
from opentinker_api.common.v1 import resources_pb2 as _resources_pb2
from opentinker_api.common.v1 import weights_pb2 as _weights_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CheckpointFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECKPOINT_FORMAT_UNSPECIFIED: _ClassVar[CheckpointFormat]
    CHECKPOINT_FORMAT_TRAINING_STATE: _ClassVar[CheckpointFormat]
    CHECKPOINT_FORMAT_HF_MODEL: _ClassVar[CheckpointFormat]
    CHECKPOINT_FORMAT_PEFT_ADAPTER: _ClassVar[CheckpointFormat]
CHECKPOINT_FORMAT_UNSPECIFIED: CheckpointFormat
CHECKPOINT_FORMAT_TRAINING_STATE: CheckpointFormat
CHECKPOINT_FORMAT_HF_MODEL: CheckpointFormat
CHECKPOINT_FORMAT_PEFT_ADAPTER: CheckpointFormat

class Session(_message.Message):
    __slots__ = ("session_id", "job_id", "model_info", "adaptation", "step", "policy_version", "pending_datums", "device_ids", "create_time")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_INFO_FIELD_NUMBER: _ClassVar[int]
    ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PENDING_DATUMS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    job_id: str
    model_info: _model_pb2.ModelInfo
    adaptation: _model_pb2.Adaptation
    step: int
    policy_version: int
    pending_datums: int
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., model_info: _Optional[_Union[_model_pb2.ModelInfo, _Mapping]] = ..., adaptation: _Optional[_Union[_model_pb2.Adaptation, _Mapping]] = ..., step: _Optional[int] = ..., policy_version: _Optional[int] = ..., pending_datums: _Optional[int] = ..., device_ids: _Optional[_Iterable[str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("request_id", "lease", "base_model", "adaptation", "optimizer", "seed", "max_tokens_per_micro_batch", "device_ids", "peers")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_MICRO_BATCH_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease: _resources_pb2.LeaseContext
    base_model: _model_pb2.ModelReference
    adaptation: _model_pb2.Adaptation
    optimizer: _algorithm_pb2.OptimizerConfig
    seed: int
    max_tokens_per_micro_batch: int
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    peers: _containers.RepeatedCompositeFieldContainer[ReplicaPeer]
    def __init__(self, request_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., base_model: _Optional[_Union[_model_pb2.ModelReference, _Mapping]] = ..., adaptation: _Optional[_Union[_model_pb2.Adaptation, _Mapping]] = ..., optimizer: _Optional[_Union[_algorithm_pb2.OptimizerConfig, _Mapping]] = ..., seed: _Optional[int] = ..., max_tokens_per_micro_batch: _Optional[int] = ..., device_ids: _Optional[_Iterable[str]] = ..., peers: _Optional[_Iterable[_Union[ReplicaPeer, _Mapping]]] = ...) -> None: ...

class ReplicaPeer(_message.Message):
    __slots__ = ("address", "device_ids", "lease")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    address: str
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    lease: _resources_pb2.LeaseContext
    def __init__(self, address: _Optional[str] = ..., device_ids: _Optional[_Iterable[str]] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ...) -> None: ...

class StartReplicasRequest(_message.Message):
    __slots__ = ("lease", "device_ids", "first_rank", "world_size", "store_address", "command_address", "authkey", "session_id")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    STORE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    AUTHKEY_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    lease: _resources_pb2.LeaseContext
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    first_rank: int
    world_size: int
    store_address: str
    command_address: str
    authkey: bytes
    session_id: str
    def __init__(self, lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., device_ids: _Optional[_Iterable[str]] = ..., first_rank: _Optional[int] = ..., world_size: _Optional[int] = ..., store_address: _Optional[str] = ..., command_address: _Optional[str] = ..., authkey: _Optional[bytes] = ..., session_id: _Optional[str] = ...) -> None: ...

class StartReplicasResponse(_message.Message):
    __slots__ = ("ranks",)
    RANKS_FIELD_NUMBER: _ClassVar[int]
    ranks: int
    def __init__(self, ranks: _Optional[int] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class ForwardBackwardRequest(_message.Message):
    __slots__ = ("session_id", "lease", "datums", "loss", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    DATUMS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    lease: _resources_pb2.LeaseContext
    datums: _containers.RepeatedCompositeFieldContainer[_datum_pb2.Datum]
    loss: _algorithm_pb2.LossConfig
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., datums: _Optional[_Iterable[_Union[_datum_pb2.Datum, _Mapping]]] = ..., loss: _Optional[_Union[_algorithm_pb2.LossConfig, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ForwardBackwardResponse(_message.Message):
    __slots__ = ("loss", "metrics", "num_tokens", "logprobs")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    LOSS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    loss: float
    metrics: _containers.ScalarMap[str, float]
    num_tokens: int
    logprobs: _containers.RepeatedCompositeFieldContainer[_datum_pb2.TokenLogprobs]
    def __init__(self, loss: _Optional[float] = ..., metrics: _Optional[_Mapping[str, float]] = ..., num_tokens: _Optional[int] = ..., logprobs: _Optional[_Iterable[_Union[_datum_pb2.TokenLogprobs, _Mapping]]] = ...) -> None: ...

class OptimStepRequest(_message.Message):
    __slots__ = ("session_id", "lease", "learning_rate", "request_id", "adam")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ADAM_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    lease: _resources_pb2.LeaseContext
    learning_rate: float
    request_id: str
    adam: _algorithm_pb2.AdamStepParams
    def __init__(self, session_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., learning_rate: _Optional[float] = ..., request_id: _Optional[str] = ..., adam: _Optional[_Union[_algorithm_pb2.AdamStepParams, _Mapping]] = ...) -> None: ...

class OptimStepResponse(_message.Message):
    __slots__ = ("step", "policy_version", "grad_norm", "learning_rate", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    GRAD_NORM_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    step: int
    policy_version: int
    grad_norm: float
    learning_rate: float
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, step: _Optional[int] = ..., policy_version: _Optional[int] = ..., grad_norm: _Optional[float] = ..., learning_rate: _Optional[float] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class ComputeLogprobsRequest(_message.Message):
    __slots__ = ("session_id", "sequences", "reference", "temperature")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    sequences: _containers.RepeatedCompositeFieldContainer[_datum_pb2.TokenSequence]
    reference: bool
    temperature: float
    def __init__(self, session_id: _Optional[str] = ..., sequences: _Optional[_Iterable[_Union[_datum_pb2.TokenSequence, _Mapping]]] = ..., reference: _Optional[bool] = ..., temperature: _Optional[float] = ...) -> None: ...

class ComputeLogprobsResponse(_message.Message):
    __slots__ = ("logprobs",)
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    logprobs: _containers.RepeatedCompositeFieldContainer[_datum_pb2.TokenLogprobs]
    def __init__(self, logprobs: _Optional[_Iterable[_Union[_datum_pb2.TokenLogprobs, _Mapping]]] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("checkpoint_id", "session_id", "format", "path", "step", "size_bytes", "create_time")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    session_id: str
    format: CheckpointFormat
    path: str
    step: int
    size_bytes: int
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, checkpoint_id: _Optional[str] = ..., session_id: _Optional[str] = ..., format: _Optional[_Union[CheckpointFormat, str]] = ..., path: _Optional[str] = ..., step: _Optional[int] = ..., size_bytes: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SaveCheckpointRequest(_message.Message):
    __slots__ = ("session_id", "lease", "format", "name", "data_cursor", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_CURSOR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    lease: _resources_pb2.LeaseContext
    format: CheckpointFormat
    name: str
    data_cursor: bytes
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., format: _Optional[_Union[CheckpointFormat, str]] = ..., name: _Optional[str] = ..., data_cursor: _Optional[bytes] = ..., request_id: _Optional[str] = ...) -> None: ...

class SaveCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class LoadCheckpointRequest(_message.Message):
    __slots__ = ("session_id", "lease", "checkpoint_id", "weights_only")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_ONLY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    lease: _resources_pb2.LeaseContext
    checkpoint_id: str
    weights_only: bool
    def __init__(self, session_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ..., checkpoint_id: _Optional[str] = ..., weights_only: _Optional[bool] = ...) -> None: ...

class LoadCheckpointResponse(_message.Message):
    __slots__ = ("session", "data_cursor")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    DATA_CURSOR_FIELD_NUMBER: _ClassVar[int]
    session: Session
    data_cursor: bytes
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., data_cursor: _Optional[bytes] = ...) -> None: ...

class ExportWeightsRequest(_message.Message):
    __slots__ = ("session_id", "format", "chunk_bytes", "transport")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    format: _weights_pb2.WeightsFormat
    chunk_bytes: int
    transport: _weights_pb2.WeightsTransport
    def __init__(self, session_id: _Optional[str] = ..., format: _Optional[_Union[_weights_pb2.WeightsFormat, str]] = ..., chunk_bytes: _Optional[int] = ..., transport: _Optional[_Union[_weights_pb2.WeightsTransport, str]] = ...) -> None: ...

class ExportWeightsResponse(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: _weights_pb2.WeightsHeader
    chunk: _weights_pb2.WeightsChunk
    def __init__(self, header: _Optional[_Union[_weights_pb2.WeightsHeader, _Mapping]] = ..., chunk: _Optional[_Union[_weights_pb2.WeightsChunk, _Mapping]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id", "lease")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    lease: _resources_pb2.LeaseContext
    def __init__(self, session_id: _Optional[str] = ..., lease: _Optional[_Union[_resources_pb2.LeaseContext, _Mapping]] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...
