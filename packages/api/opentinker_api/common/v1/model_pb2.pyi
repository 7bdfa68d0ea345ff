from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Precision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRECISION_UNSPECIFIED: _ClassVar[Precision]
    PRECISION_FLOAT32: _ClassVar[Precision]
    PRECISION_BFLOAT16: _ClassVar[Precision]
    PRECISION_FLOAT16: _ClassVar[Precision]
PRECISION_UNSPECIFIED: Precision
PRECISION_FLOAT32: Precision
PRECISION_BFLOAT16: Precision
PRECISION_FLOAT16: Precision

class ModelReference(_message.Message):
    __slots__ = ("local", "builtin", "checkpoint", "precision")
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    local: LocalModel
    builtin: BuiltinModel
    checkpoint: CheckpointModel
    precision: Precision
    def __init__(self, local: _Optional[_Union[LocalModel, _Mapping]] = ..., builtin: _Optional[_Union[BuiltinModel, _Mapping]] = ..., checkpoint: _Optional[_Union[CheckpointModel, _Mapping]] = ..., precision: _Optional[_Union[Precision, str]] = ...) -> None: ...

class LocalModel(_message.Message):
    __slots__ = ("path", "tokenizer_path")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    tokenizer_path: str
    def __init__(self, path: _Optional[str] = ..., tokenizer_path: _Optional[str] = ...) -> None: ...

class BuiltinModel(_message.Message):
    __slots__ = ("name", "seed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    name: str
    seed: int
    def __init__(self, name: _Optional[str] = ..., seed: _Optional[int] = ...) -> None: ...

class CheckpointModel(_message.Message):
    __slots__ = ("checkpoint_id",)
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    def __init__(self, checkpoint_id: _Optional[str] = ...) -> None: ...

class Adaptation(_message.Message):
    __slots__ = ("lora", "full")
    LORA_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    lora: LoraAdaptation
    full: FullAdaptation
    def __init__(self, lora: _Optional[_Union[LoraAdaptation, _Mapping]] = ..., full: _Optional[_Union[FullAdaptation, _Mapping]] = ...) -> None: ...

class LoraAdaptation(_message.Message):
    __slots__ = ("rank", "alpha", "dropout", "target_modules")
    RANK_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_FIELD_NUMBER: _ClassVar[int]
    TARGET_MODULES_FIELD_NUMBER: _ClassVar[int]
    rank: int
    alpha: float
    dropout: float
    target_modules: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, rank: _Optional[int] = ..., alpha: _Optional[float] = ..., dropout: _Optional[float] = ..., target_modules: _Optional[_Iterable[str]] = ...) -> None: ...

class FullAdaptation(_message.Message):
    __slots__ = ("keep_reference",)
    KEEP_REFERENCE_FIELD_NUMBER: _ClassVar[int]
    keep_reference: bool
    def __init__(self, keep_reference: _Optional[bool] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("architecture", "parameter_count", "trainable_parameter_count", "vocab_size", "max_context_length", "stop_token_ids")
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    architecture: str
    parameter_count: int
    trainable_parameter_count: int
    vocab_size: int
    max_context_length: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, architecture: _Optional[str] = ..., parameter_count: _Optional[int] = ..., trainable_parameter_count: _Optional[int] = ..., vocab_size: _Optional[int] = ..., max_context_length: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...
