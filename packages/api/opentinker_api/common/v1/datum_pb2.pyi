from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Datum(_message.Message):
    __slots__ = ("tokens", "loss_mask", "advantages", "sampling_logprobs", "reference_logprobs", "group_id")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOSS_MASK_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGES_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    loss_mask: _containers.RepeatedScalarFieldContainer[float]
    advantages: _containers.RepeatedScalarFieldContainer[float]
    sampling_logprobs: _containers.RepeatedScalarFieldContainer[float]
    reference_logprobs: _containers.RepeatedScalarFieldContainer[float]
    group_id: str
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., loss_mask: _Optional[_Iterable[float]] = ..., advantages: _Optional[_Iterable[float]] = ..., sampling_logprobs: _Optional[_Iterable[float]] = ..., reference_logprobs: _Optional[_Iterable[float]] = ..., group_id: _Optional[str] = ...) -> None: ...

class TokenSequence(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class TokenLogprobs(_message.Message):
    __slots__ = ("logprobs",)
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, logprobs: _Optional[_Iterable[float]] = ...) -> None: ...
