from opentinker_api.common.v1 import model_pb2 as _model_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WeightsFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WEIGHTS_FORMAT_UNSPECIFIED: _ClassVar[WeightsFormat]
    WEIGHTS_FORMAT_LORA_ADAPTER: _ClassVar[WeightsFormat]
    WEIGHTS_FORMAT_FULL: _ClassVar[WeightsFormat]

class WeightsTransport(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WEIGHTS_TRANSPORT_UNSPECIFIED: _ClassVar[WeightsTransport]
    WEIGHTS_TRANSPORT_STREAM: _ClassVar[WeightsTransport]
    WEIGHTS_TRANSPORT_SHARED_MEMORY: _ClassVar[WeightsTransport]

class ChecksumAlgorithm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECKSUM_ALGORITHM_UNSPECIFIED: _ClassVar[ChecksumAlgorithm]
    CHECKSUM_ALGORITHM_XXH3_64: _ClassVar[ChecksumAlgorithm]
    CHECKSUM_ALGORITHM_XXH3_64_CHUNKED: _ClassVar[ChecksumAlgorithm]

class TensorDtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TENSOR_DTYPE_UNSPECIFIED: _ClassVar[TensorDtype]
    TENSOR_DTYPE_FLOAT32: _ClassVar[TensorDtype]
    TENSOR_DTYPE_BFLOAT16: _ClassVar[TensorDtype]
    TENSOR_DTYPE_FLOAT16: _ClassVar[TensorDtype]
WEIGHTS_FORMAT_UNSPECIFIED: WeightsFormat
WEIGHTS_FORMAT_LORA_ADAPTER: WeightsFormat
WEIGHTS_FORMAT_FULL: WeightsFormat
WEIGHTS_TRANSPORT_UNSPECIFIED: WeightsTransport
WEIGHTS_TRANSPORT_STREAM: WeightsTransport
WEIGHTS_TRANSPORT_SHARED_MEMORY: WeightsTransport
CHECKSUM_ALGORITHM_UNSPECIFIED: ChecksumAlgorithm
CHECKSUM_ALGORITHM_XXH3_64: ChecksumAlgorithm
CHECKSUM_ALGORITHM_XXH3_64_CHUNKED: ChecksumAlgorithm
TENSOR_DTYPE_UNSPECIFIED: TensorDtype
TENSOR_DTYPE_FLOAT32: TensorDtype
TENSOR_DTYPE_BFLOAT16: TensorDtype
TENSOR_DTYPE_FLOAT16: TensorDtype

class WeightsHeader(_message.Message):
    __slots__ = ("format", "policy_version", "adaptation", "tensors", "total_bytes", "sha256", "checksum", "shared_file")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    SHARED_FILE_FIELD_NUMBER: _ClassVar[int]
    format: WeightsFormat
    policy_version: int
    adaptation: _model_pb2.Adaptation
    tensors: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    total_bytes: int
    sha256: str
    checksum: WeightsChecksum
    shared_file: SharedWeightsFile
    def __init__(self, format: _Optional[_Union[WeightsFormat, str]] = ..., policy_version: _Optional[int] = ..., adaptation: _Optional[_Union[_model_pb2.Adaptation, _Mapping]] = ..., tensors: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., total_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., checksum: _Optional[_Union[WeightsChecksum, _Mapping]] = ..., shared_file: _Optional[_Union[SharedWeightsFile, _Mapping]] = ...) -> None: ...

class WeightsChecksum(_message.Message):
    __slots__ = ("algorithm", "hex_digest")
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    HEX_DIGEST_FIELD_NUMBER: _ClassVar[int]
    algorithm: ChecksumAlgorithm
    hex_digest: str
    def __init__(self, algorithm: _Optional[_Union[ChecksumAlgorithm, str]] = ..., hex_digest: _Optional[str] = ...) -> None: ...

class SharedWeightsFile(_message.Message):
    __slots__ = ("name", "size_bytes", "nonce")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    size_bytes: int
    nonce: str
    def __init__(self, name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., nonce: _Optional[str] = ...) -> None: ...

class TensorSpec(_message.Message):
    __slots__ = ("name", "dtype", "shape", "byte_length")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    BYTE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: TensorDtype
    shape: _containers.RepeatedScalarFieldContainer[int]
    byte_length: int
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[_Union[TensorDtype, str]] = ..., shape: _Optional[_Iterable[int]] = ..., byte_length: _Optional[int] = ...) -> None: ...

class WeightsChunk(_message.Message):
    __slots__ = ("tensor_name", "offset", "data")
    TENSOR_NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    tensor_name: str
    offset: int
    data: bytes
    def __init__(self, tensor_name: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...
