"""protobuf <-> domain conversion for the TrainerService (the only module besides the
servicer that knows the generated messages).

Proto3 zeros mean "unset", with the values a job's plan gets (`opentinker_runtime.jobplan.defaults`,
listed once: a Coordinator sends them resolved, other callers may leave them 0): temperature 0 = 1;
beta1/beta2/epsilon 0 = AdamW's defaults; LoRA rank 0 = 8, alpha 0 = 2 x rank (`jobplan.models`,
which the Rollout uses too); checkpoint format UNSPECIFIED = TRAINING_STATE; aggregation UNSPECIFIED =
TOKEN_MEAN; KL estimator UNSPECIFIED = K3; importance mask UNSPECIFIED = off, its band's
low 0 = 0.5 and high 0 = 2.0; weights format UNSPECIFIED = LORA_ADAPTER for LoRA
sessions, FULL otherwise. Clip ranges are not defaulted: a ratio loss with clip_low 0 is
refused, naming the field (CISPO accepts it: its lower bound is then 1); nor is dro_beta, nor
any field of OptimStepRequest.adam (Tinker sends all of them, 0 meaning 0).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from opentinker_api.common.v1 import algorithm_pb2 as algo_pb
from opentinker_api.common.v1 import datum_pb2, model_pb2, weights_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_runtime.edge.convert import lease_from_proto
from opentinker_runtime.jobplan import defaults, models
from opentinker_runtime.jobplan.bounds import MAX_LORA_RANK
from opentinker_runtime.jobplan.errors import ResolveError
from opentinker_runtime.ml.checkpoints import CheckpointFormat
from opentinker_runtime.ml.sources import LoraSpec, ModelInfo, ModelSource, Precision
from opentinker_runtime.ml.weights import ChecksumAlgorithm, Chunk, TensorSpec
from opentinker_trainer.batching import Datum
from opentinker_trainer.checkpointing import CheckpointRecord
from opentinker_trainer.config import (AdamStep, ImportanceMask, KlEstimator, KlPlacement,
                                       LossAggregation, LossConfig, LossFunction, LrSchedule,
                                       OptimizerConfig, SessionSpec)
from opentinker_trainer.errors import ValidationError
from opentinker_trainer.export import WeightsExport, WeightsFormat
from opentinker_trainer.remote_replicas import ReplicaPeer
from opentinker_trainer.replicas import ReplicaInvite
from opentinker_trainer.session import SessionView
from opentinker_trainer.sessions import RequestKey

MAX_CHUNK_BYTES = 4 * 1024 * 1024 - 64 * 1024  # below gRPC's default 4 MiB message limit
LOSS_FUNCTIONS = {
    algo_pb.LOSS_FUNCTION_CROSS_ENTROPY: LossFunction.CROSS_ENTROPY,
    algo_pb.LOSS_FUNCTION_POLICY_GRADIENT: LossFunction.POLICY_GRADIENT,
    algo_pb.LOSS_FUNCTION_PPO_CLIP: LossFunction.PPO_CLIP,
    algo_pb.LOSS_FUNCTION_DUAL_CLIP: LossFunction.DUAL_CLIP,
    algo_pb.LOSS_FUNCTION_TRUNCATED_IS: LossFunction.TRUNCATED_IS,
    algo_pb.LOSS_FUNCTION_GSPO: LossFunction.GSPO,
    algo_pb.LOSS_FUNCTION_IMPORTANCE_SAMPLING: LossFunction.IMPORTANCE_SAMPLING,
    algo_pb.LOSS_FUNCTION_CISPO: LossFunction.CISPO,
    algo_pb.LOSS_FUNCTION_DRO: LossFunction.DRO,
}
AGGREGATIONS = {
    algo_pb.LOSS_AGGREGATION_UNSPECIFIED: LossAggregation.TOKEN_MEAN,
    algo_pb.LOSS_AGGREGATION_TOKEN_MEAN: LossAggregation.TOKEN_MEAN,
    algo_pb.LOSS_AGGREGATION_SEQUENCE_MEAN: LossAggregation.SEQUENCE_MEAN,
    algo_pb.LOSS_AGGREGATION_TOKEN_SUM_NORM: LossAggregation.TOKEN_SUM_NORM,
    algo_pb.LOSS_AGGREGATION_SUM: LossAggregation.SUM,
}
KL_ESTIMATORS = {algo_pb.KL_ESTIMATOR_UNSPECIFIED: KlEstimator.K3,
                 algo_pb.KL_ESTIMATOR_K1: KlEstimator.K1, algo_pb.KL_ESTIMATOR_K3: KlEstimator.K3}
KL_PLACEMENTS = {algo_pb.KL_PLACEMENT_UNSPECIFIED: KlPlacement.NONE,
                 algo_pb.KL_PLACEMENT_LOSS: KlPlacement.LOSS,
                 algo_pb.KL_PLACEMENT_REWARD: KlPlacement.REWARD}
IMPORTANCE_MASKS = {algo_pb.IMPORTANCE_MASK_UNSPECIFIED: ImportanceMask.OFF,
                    algo_pb.IMPORTANCE_MASK_TOKEN: ImportanceMask.TOKEN,
                    algo_pb.IMPORTANCE_MASK_SEQUENCE: ImportanceMask.SEQUENCE}
SCHEDULES = {algo_pb.LR_SCHEDULE_UNSPECIFIED: LrSchedule.CONSTANT,
             algo_pb.LR_SCHEDULE_CONSTANT: LrSchedule.CONSTANT,
             algo_pb.LR_SCHEDULE_LINEAR: LrSchedule.LINEAR,
             algo_pb.LR_SCHEDULE_COSINE: LrSchedule.COSINE}
PRECISIONS = {model_pb2.PRECISION_UNSPECIFIED: Precision.DEFAULT,
              model_pb2.PRECISION_FLOAT32: Precision.FLOAT32,
              model_pb2.PRECISION_BFLOAT16: Precision.BFLOAT16,
              model_pb2.PRECISION_FLOAT16: Precision.FLOAT16}
CHECKPOINT_FORMATS = {pb.CHECKPOINT_FORMAT_UNSPECIFIED: CheckpointFormat.TRAINING_STATE,
                      pb.CHECKPOINT_FORMAT_TRAINING_STATE: CheckpointFormat.TRAINING_STATE,
                      pb.CHECKPOINT_FORMAT_HF_MODEL: CheckpointFormat.HF_MODEL,
                      pb.CHECKPOINT_FORMAT_PEFT_ADAPTER: CheckpointFormat.PEFT_ADAPTER}
WEIGHTS_FORMATS = {weights_pb2.WEIGHTS_FORMAT_UNSPECIFIED: None,
                   weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER: WeightsFormat.LORA_ADAPTER,
                   weights_pb2.WEIGHTS_FORMAT_FULL: WeightsFormat.FULL}
CHECKSUM_ALGORITHMS = {ChecksumAlgorithm.XXH3_64_CHUNKED: weights_pb2.CHECKSUM_ALGORITHM_XXH3_64_CHUNKED,
                       ChecksumAlgorithm.XXH3_64: weights_pb2.CHECKSUM_ALGORITHM_XXH3_64}
TENSOR_DTYPES = {"float32": weights_pb2.TENSOR_DTYPE_FLOAT32,
                 "bfloat16": weights_pb2.TENSOR_DTYPE_BFLOAT16,
                 "float16": weights_pb2.TENSOR_DTYPE_FLOAT16}


def enum_value(table: dict[int, Any], value: int, field: str, enum_type: Any) -> Any:
    """table[value], or ValidationError listing the accepted names."""
    if value not in table:
        names = ", ".join(enum_type.Name(v) for v in table)
        raise ValidationError(field, f"{_enum_name(enum_type, value)} is not accepted; use one of {names}")
    return table[value]


def _enum_name(enum_type: Any, value: int) -> str:
    try:
        return enum_type.Name(value)
    except ValueError:
        return str(value)


def request_key(kind: str, request: Message) -> RequestKey | None:
    """The idempotency key of a request with a request_id (the lease is not fingerprinted)."""
    request_id = getattr(request, "request_id", "")
    if not request_id:
        return None
    content = type(request)()
    content.CopyFrom(request)
    if content.DESCRIPTOR.fields_by_name.get("lease"):
        content.ClearField("lease")
    digest = hashlib.sha256(content.SerializeToString(deterministic=True)).hexdigest()
    return RequestKey(kind=kind, request_id=request_id, fingerprint=digest)


# ---------------------------------------------------------------- requests -> domain


def session_spec(request: pb.CreateSessionRequest) -> SessionSpec:
    lora, keep_reference = adaptation(request.adaptation)
    return SessionSpec(base=model_source(request.base_model), optimizer=optimizer(request.optimizer),
                       lora=lora, keep_reference=keep_reference, job_id=request.lease.job_id,
                       seed=request.seed,
                       max_tokens_per_micro_batch=request.max_tokens_per_micro_batch)


def model_source(reference: model_pb2.ModelReference) -> ModelSource:
    try:
        return models.model_source(reference, "base_model")
    except ResolveError as error:
        raise ValidationError(error.field, error.message) from error


def adaptation(message: model_pb2.Adaptation) -> tuple[LoraSpec | None, bool]:
    """(LoRA spec or None for full training, keep_reference)."""
    kind = message.WhichOneof("kind")
    if kind not in ("full", "lora"):
        raise ValidationError("adaptation", "set lora or full")
    try:
        lora = models.lora_spec(message)  # rank at most MAX_LORA_RANK
    except ResolveError as error:
        raise ValidationError(error.field, error.message) from error
    return lora, kind == "full" and message.full.keep_reference


def optimizer(message: algo_pb.OptimizerConfig) -> OptimizerConfig:
    return OptimizerConfig(
        learning_rate=message.learning_rate, weight_decay=message.weight_decay,
        beta1=message.beta1 or defaults.BETA1, beta2=message.beta2 or defaults.BETA2,
        epsilon=message.epsilon or defaults.EPSILON,
        max_grad_norm=message.max_grad_norm, warmup_steps=message.warmup_steps,
        schedule=enum_value(SCHEDULES, message.schedule, "optimizer.schedule", algo_pb.LrSchedule),
        total_steps=message.total_steps)


def loss_config(message: algo_pb.LossConfig) -> LossConfig:
    return LossConfig(
        function=enum_value(LOSS_FUNCTIONS, message.function, "loss.function", algo_pb.LossFunction),
        aggregation=enum_value(AGGREGATIONS, message.aggregation, "loss.aggregation",
                               algo_pb.LossAggregation),
        clip_low=message.clip_low, clip_high=message.clip_high, dual_clip_c=message.dual_clip_c,
        truncation_cap=message.truncation_cap, token_sum_divisor=message.token_sum_divisor,
        kl_coef=message.kl_coef,
        kl_estimator=enum_value(KL_ESTIMATORS, message.kl_estimator, "loss.kl_estimator",
                                algo_pb.KlEstimator),
        kl_placement=enum_value(KL_PLACEMENTS, message.kl_placement, "loss.kl_placement",
                                algo_pb.KlPlacement),
        entropy_coef=message.entropy_coef, temperature=message.temperature or defaults.LOSS_TEMPERATURE,
        importance_mask=enum_value(IMPORTANCE_MASKS, message.importance_mask,
                                   "loss.importance_mask", algo_pb.ImportanceMask),
        importance_mask_low=message.importance_mask_low or defaults.IMPORTANCE_MASK_LOW,
        importance_mask_high=message.importance_mask_high or defaults.IMPORTANCE_MASK_HIGH,
        dro_beta=message.dro_beta)


def adam_step(message: algo_pb.AdamStepParams) -> AdamStep:
    return AdamStep(learning_rate=message.learning_rate, beta1=message.beta1, beta2=message.beta2,
                    epsilon=message.epsilon, weight_decay=message.weight_decay,
                    max_grad_norm=message.max_grad_norm)


def datum(message: datum_pb2.Datum) -> Datum:
    return Datum(tokens=tuple(message.tokens), loss_mask=tuple(message.loss_mask),
                 advantages=tuple(message.advantages),
                 sampling_logprobs=tuple(message.sampling_logprobs),
                 reference_logprobs=tuple(message.reference_logprobs), group_id=message.group_id)


def checkpoint_format(value: int) -> CheckpointFormat:
    return enum_value(CHECKPOINT_FORMATS, value, "format", pb.CheckpointFormat)


def weights_format(value: int) -> WeightsFormat | None:
    return enum_value(WEIGHTS_FORMATS, value, "format", weights_pb2.WeightsFormat)


# ---------------------------------------------------------------- domain -> responses


def session_message(view: SessionView) -> pb.Session:
    return pb.Session(session_id=view.session_id, job_id=view.job_id,
                      model_info=model_info_message(view.model_info),
                      adaptation=adaptation_message(view.lora, view.keep_reference),
                      step=view.step, policy_version=view.policy_version,
                      pending_datums=view.pending_datums, device_ids=list(view.device_ids),
                      create_time=timestamp(view.created_at))


def model_info_message(info: ModelInfo) -> model_pb2.ModelInfo:
    return model_pb2.ModelInfo(
        architecture=info.architecture, parameter_count=info.parameter_count,
        trainable_parameter_count=info.trainable_parameter_count, vocab_size=info.vocab_size,
        max_context_length=info.max_context_length, stop_token_ids=list(info.stop_token_ids))


def adaptation_message(lora: LoraSpec | None, keep_reference: bool = False) -> model_pb2.Adaptation:
    if lora is None:
        return model_pb2.Adaptation(full=model_pb2.FullAdaptation(keep_reference=keep_reference))
    return model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(
        rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout,
        target_modules=list(lora.target_modules)))


def checkpoint_message(record: CheckpointRecord) -> pb.Checkpoint:
    formats = {domain: value for value, domain in CHECKPOINT_FORMATS.items() if value}
    return pb.Checkpoint(checkpoint_id=record.checkpoint_id, session_id=record.session_id,
                         format=formats[record.format], path=str(record.path), step=record.step,
                         size_bytes=record.size_bytes, create_time=timestamp(record.created_at))


def weights_header(export: WeightsExport) -> weights_pb2.WeightsHeader:
    formats = {domain: value for value, domain in WEIGHTS_FORMATS.items() if domain}
    header = weights_pb2.WeightsHeader(
        format=formats[export.format], policy_version=export.policy_version,
        total_bytes=export.package.total_bytes,
        checksum=weights_pb2.WeightsChecksum(algorithm=CHECKSUM_ALGORITHMS[export.package.checksum.algorithm],
                                             hex_digest=export.package.checksum.hex_digest))
    header.MergeFrom(_tensor_list(tuple(export.package.specs)))
    if export.lora is not None:
        header.adaptation.CopyFrom(adaptation_message(export.lora))
    if export.shared_file is not None:
        header.shared_file.CopyFrom(weights_pb2.SharedWeightsFile(
            name=export.shared_file.name, size_bytes=export.shared_file.size_bytes, nonce=export.shared_file.nonce))
    return header


@functools.lru_cache(maxsize=32)
def _tensor_list(specs: tuple[TensorSpec, ...]) -> weights_pb2.WeightsHeader:
    """A header holding only `tensors` (read only: merged into each export's header). Remembered:
    a session's layout rarely changes, and building a hundred-odd messages costs ~0.5 ms."""
    return weights_pb2.WeightsHeader(tensors=[tensor_spec_message(spec) for spec in specs])


def chunk_bytes(value: int) -> int:
    """ExportWeightsRequest.chunk_bytes, within what one gRPC message may carry."""
    if value > MAX_CHUNK_BYTES:
        raise ValidationError("chunk_bytes", f"must be <= {MAX_CHUNK_BYTES} (gRPC message limit)")
    return value


def shared_memory_requested(value: int) -> bool:
    """Whether ExportWeightsRequest.transport asks for a shared-memory file (UNSPECIFIED = stream)."""
    if value not in weights_pb2.WeightsTransport.values():
        raise ValidationError("transport", f"unknown WeightsTransport value {value}")
    return value == weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY


def tensor_spec_message(spec: TensorSpec) -> weights_pb2.TensorSpec:
    return weights_pb2.TensorSpec(name=spec.name, dtype=TENSOR_DTYPES[spec.dtype],
                                  shape=list(spec.shape), byte_length=spec.byte_length)


def token_logprobs_messages(rows: list[list[float]]) -> list[datum_pb2.TokenLogprobs]:
    return [datum_pb2.TokenLogprobs(logprobs=row) for row in rows]


def timestamp(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def chunk_response(chunk: Chunk) -> pb.ExportWeightsResponse:
    """One chunk message, its bytes set in place (building a WeightsChunk first and passing it
    to the constructor copies the megabyte once more)."""
    response = pb.ExportWeightsResponse()
    response.chunk.tensor_name = chunk.tensor_name
    response.chunk.offset = chunk.offset
    response.chunk.data = chunk.data
    return response


MAX_PEERS = 64


def replica_peers(messages: Sequence[pb.ReplicaPeer]) -> tuple[ReplicaPeer, ...]:
    if len(messages) > MAX_PEERS:
        raise ValidationError("peers", f"{len(messages)} peers; at most {MAX_PEERS}")
    return tuple(ReplicaPeer(address=m.address, device_ids=tuple(m.device_ids), lease=lease_from_proto(m.lease))
                 for m in messages)


def replica_invite(request: pb.StartReplicasRequest) -> ReplicaInvite:
    for field in ("store_address", "command_address"):
        host, _, port = getattr(request, field).rpartition(":")
        if not host or not port.isdigit():
            raise ValidationError(field, f"{getattr(request, field)!r} is not host:port")
    if len(request.authkey) < 16:
        raise ValidationError("authkey", "needs at least 16 bytes")
    return ReplicaInvite(first_rank=request.first_rank, world_size=request.world_size,
                         store_address=request.store_address, command_address=request.command_address,
                         authkey=request.authkey)
