"""The TrainerService servicer: converts protobuf <-> domain objects and maps domain errors
to status codes (in `_ERROR_STATUS`, the one place that does). The work happens in
`SessionRegistry` and `TrainingSession`.

A refused call carries its `common.v1.ErrorReason` name in the trailing metadata key
`opentinker-reason` (e.g. ERROR_REASON_STALE_FENCING_TOKEN).

Every call on a job's session (or with a job's lease) must carry the job's current attempt token
(`opentinker_runtime.auth.job_token_guard`); sessions opened without a job (Tinker-style primitives
with an admin key) need none.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import structlog
import torch

from opentinker_api.common.v1 import errors_pb2, resources_pb2, weights_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.job_token_guard import require_job_token
from opentinker_runtime.core.server import ServiceBinding
from opentinker_trainer import convert
from opentinker_trainer.checkpointing import load_checkpoint, save_checkpoint
from opentinker_trainer.errors import (CheckpointNotFoundError, NoGradientsError, NoReferenceError,
                                       RequestIdReusedError, SessionNotFoundError, StaleFencingError,
                                       TrainerError, ValidationError)
from opentinker_trainer.export import export_weights, export_weights_shared
from opentinker_trainer.sessions import DEFAULT_IDLE_TTL_S, SessionRegistry
from opentinker_trainer.shared_exports import SharedExports
from opentinker_runtime.core.errors import REASON_METADATA_KEY

log = structlog.get_logger(__name__)

SERVICE_FULL_NAME = pb.DESCRIPTOR.services_by_name["TrainerService"].full_name
MAX_CHUNK_BYTES = 4 * 1024 * 1024 - 64 * 1024  # below gRPC's default 4 MiB message limit

_ERROR_STATUS: tuple[tuple[type[TrainerError], grpc.StatusCode, int], ...] = (
    (SessionNotFoundError, grpc.StatusCode.NOT_FOUND, errors_pb2.ERROR_REASON_SESSION_NOT_FOUND),
    (CheckpointNotFoundError, grpc.StatusCode.NOT_FOUND, errors_pb2.ERROR_REASON_UNSPECIFIED),
    (ValidationError, grpc.StatusCode.INVALID_ARGUMENT, errors_pb2.ERROR_REASON_INVALID_FIELD),
    (RequestIdReusedError, grpc.StatusCode.INVALID_ARGUMENT, errors_pb2.ERROR_REASON_REQUEST_ID_REUSED),
    (StaleFencingError, grpc.StatusCode.FAILED_PRECONDITION, errors_pb2.ERROR_REASON_STALE_FENCING_TOKEN),
    (NoGradientsError, grpc.StatusCode.FAILED_PRECONDITION, errors_pb2.ERROR_REASON_UNSPECIFIED),
    (NoReferenceError, grpc.StatusCode.FAILED_PRECONDITION, errors_pb2.ERROR_REASON_UNSPECIFIED),
)


def status_of(error: TrainerError) -> tuple[grpc.StatusCode, int]:
    """(status code, ErrorReason) of a domain error; INTERNAL for an unlisted class."""
    for error_type, code, reason in _ERROR_STATUS:
        if isinstance(error, error_type):
            return code, reason
    return grpc.StatusCode.INTERNAL, errors_pb2.ERROR_REASON_UNSPECIFIED


async def _abort(context: grpc.aio.ServicerContext, method: str, error: TrainerError) -> None:
    code, reason = status_of(error)
    log.info("rpc_refused", method=method, code=code.name, error=str(error))
    metadata = ((REASON_METADATA_KEY, errors_pb2.ErrorReason.Name(reason)),) if reason else ()
    await context.abort(code, str(error), trailing_metadata=metadata)


def maps_domain_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a TrainerError raised by a unary or server-streaming handler into its status."""
    if inspect.isasyncgenfunction(handler):
        @functools.wraps(handler)
        async def streaming(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                async for item in handler(self, request, context):
                    yield item
            except TrainerError as error:
                await _abort(context, handler.__name__, error)
        return streaming

    @functools.wraps(handler)
    async def unary(self: Any, request: Any, context: Any) -> Any:
        try:
            return await handler(self, request, context)
        except TrainerError as error:
            await _abort(context, handler.__name__, error)
    return unary


class TrainerServicer(pb_grpc.TrainerServiceServicer):
    """Every TrainerService RPC over one SessionRegistry."""

    def __init__(self, registry: SessionRegistry, shared: SharedExports | None = None) -> None:
        self.registry = registry
        self.shared = shared or SharedExports(None)

    async def _job_token(self, context: Any, *, lease: resources_pb2.LeaseContext | None = None,
                         session_id: str = "") -> None:
        """The job token check: of the lease's job and attempt, else of the session's job."""
        if lease is not None and lease.job_id:
            await require_job_token(context, job_id=lease.job_id, fencing_token=lease.fencing_token)
        elif session_id:
            await require_job_token(context, job_id=self.registry.view(session_id).job_id, field="session_id")

    @maps_domain_errors
    async def CreateSession(self, request: pb.CreateSessionRequest, context: Any) -> pb.CreateSessionResponse:
        await self._job_token(context, lease=request.lease)
        view = await self.registry.create(convert.session_spec(request), lease=convert.lease(request.lease),
                                          device_ids=list(request.device_ids),
                                          request=convert.request_key("CreateSession", request))
        log.info("session_created", session_id=view.session_id, job_id=view.job_id,
                 device_ids=list(view.device_ids))
        return pb.CreateSessionResponse(session=convert.session_message(view))

    @maps_domain_errors
    async def GetSession(self, request: pb.GetSessionRequest, context: Any) -> pb.GetSessionResponse:
        await self._job_token(context, session_id=request.session_id)
        return pb.GetSessionResponse(session=convert.session_message(self.registry.view(request.session_id)))

    @maps_domain_errors
    async def ForwardBackward(self, request: pb.ForwardBackwardRequest,
                              context: Any) -> pb.ForwardBackwardResponse:
        await self._job_token(context, lease=request.lease, session_id=request.session_id)
        datums = [convert.datum(message) for message in request.datums]
        loss = convert.loss_config(request.loss)
        result = await self.registry.run(
            request.session_id, convert.lease(request.lease),
            lambda session: session.forward_backward(datums, loss),
            request=convert.request_key("ForwardBackward", request))
        return pb.ForwardBackwardResponse(
            loss=result.loss, metrics={**result.metrics, **result.memory}, num_tokens=result.num_tokens,
            logprobs=convert.token_logprobs_messages(result.logprobs))

    @maps_domain_errors
    async def OptimStep(self, request: pb.OptimStepRequest, context: Any) -> pb.OptimStepResponse:
        await self._job_token(context, lease=request.lease, session_id=request.session_id)
        adam = convert.adam_step(request.adam) if request.HasField("adam") else None
        result = await self.registry.run(
            request.session_id, convert.lease(request.lease),
            lambda session: session.optim_step(request.learning_rate, adam),
            request=convert.request_key("OptimStep", request))
        return pb.OptimStepResponse(step=result.step, policy_version=result.policy_version,
                                    grad_norm=result.grad_norm, learning_rate=result.learning_rate,
                                    metrics={**result.metrics, **result.memory})

    @maps_domain_errors
    async def ComputeLogprobs(self, request: pb.ComputeLogprobsRequest,
                              context: Any) -> pb.ComputeLogprobsResponse:
        await self._job_token(context, session_id=request.session_id)
        sequences = [list(sequence.tokens) for sequence in request.sequences]
        rows = await self.registry.run(request.session_id, None, lambda session: session.compute_logprobs(
            sequences, reference=request.reference, temperature=request.temperature or 1.0))
        return pb.ComputeLogprobsResponse(logprobs=convert.token_logprobs_messages(rows))

    @maps_domain_errors
    async def SaveCheckpoint(self, request: pb.SaveCheckpointRequest,
                             context: Any) -> pb.SaveCheckpointResponse:
        await self._job_token(context, lease=request.lease, session_id=request.session_id)
        format = convert.checkpoint_format(request.format)
        record = await self.registry.run(
            request.session_id, convert.lease(request.lease),
            lambda session: save_checkpoint(session, self.registry.checkpoint_root, format=format,
                                            name=request.name, data_cursor=request.data_cursor),
            request=convert.request_key("SaveCheckpoint", request))
        log.info("checkpoint_saved", checkpoint_id=record.checkpoint_id, path=str(record.path))
        return pb.SaveCheckpointResponse(checkpoint=convert.checkpoint_message(record))

    @maps_domain_errors
    async def LoadCheckpoint(self, request: pb.LoadCheckpointRequest,
                             context: Any) -> pb.LoadCheckpointResponse:
        await self._job_token(context, lease=request.lease, session_id=request.session_id)

        def work(session: Any) -> tuple[bytes, Any]:
            cursor = load_checkpoint(session, self.registry.checkpoint_root, request.checkpoint_id,
                                     weights_only=request.weights_only)
            return cursor, session.view()
        cursor, view = await self.registry.run(request.session_id, convert.lease(request.lease), work)
        return pb.LoadCheckpointResponse(session=convert.session_message(view), data_cursor=cursor)

    @maps_domain_errors
    async def ExportWeights(self, request: pb.ExportWeightsRequest,
                            context: Any) -> AsyncIterator[pb.ExportWeightsResponse]:
        await self._job_token(context, session_id=request.session_id)
        if request.chunk_bytes > MAX_CHUNK_BYTES:
            raise ValidationError("chunk_bytes", f"must be <= {MAX_CHUNK_BYTES} (gRPC message limit)")
        format = convert.weights_format(request.format)
        shared_memory = convert.shared_memory_requested(request.transport)
        export = await self.registry.run(request.session_id, None, lambda session: self._export(
            session, format, shared_memory, request.chunk_bytes))
        yield pb.ExportWeightsResponse(header=convert.weights_header(export))
        for chunk in export.package.chunks:
            yield convert.chunk_response(chunk)

    def _export(self, session: Any, format: Any, shared_memory: bool, chunk_bytes: int) -> Any:
        """A shared-memory file when asked for and possible here, else the stream (either way the
        session's previous file goes)."""
        if shared_memory:
            export = export_weights_shared(session, format, self.shared)
            if export is not None:
                return export
        self.shared.forget(session.session_id)
        return export_weights(session, format, chunk_bytes=chunk_bytes)

    @maps_domain_errors
    async def CloseSession(self, request: pb.CloseSessionRequest, context: Any) -> pb.CloseSessionResponse:
        await self._job_token(context, lease=request.lease, session_id=request.session_id)
        view = await self.registry.close(request.session_id, convert.lease(request.lease))
        log.info("session_closed", session_id=view.session_id, step=view.step)
        return pb.CloseSessionResponse(session=convert.session_message(view))


def trainer_service_binding(registry: SessionRegistry, shared: SharedExports | None = None) -> ServiceBinding:
    """The TrainerService to host, over `registry`, writing shared-memory exports with `shared`
    (None: always stream)."""
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=TrainerServicer(registry, shared),
                          add_to_server=pb_grpc.add_TrainerServiceServicer_to_server)


def build_registry(checkpoint_dir: Path, device: str = "auto",
                   device_ids: Sequence[str] = (), *,
                   idle_ttl_s: float = DEFAULT_IDLE_TTL_S) -> SessionRegistry:
    """A registry writing checkpoints under `checkpoint_dir` (created on the first save),
    offering sessions `device_ids` (default: one, "<device>:0"), closing sessions idle for
    `idle_ttl_s` when its `reap_idle` runs.

    device "auto" = the first CUDA device when torch sees one, else the CPU.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return SessionRegistry(checkpoint_root=Path(checkpoint_dir).resolve(), device=device,
                           device_ids=tuple(device_ids) or (f"{device}:0",), idle_ttl_s=idle_ttl_s)
