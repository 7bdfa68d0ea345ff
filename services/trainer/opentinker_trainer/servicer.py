"""The TrainerService servicer: protobuf -> the `Trainer`'s operations -> protobuf, nothing else.

Errors are the Trainer's DomainErrors, mapped by the service edge (`opentinker_runtime.edge`);
a refused call carries its ErrorReason name in `opentinker-reason` (e.g.
ERROR_REASON_STALE_FENCING_TOKEN). Every call on a job's session (or with a job's lease) must
carry the job's current attempt token (the `job_token` declarations); sessions opened without a
job (Tinker-style primitives with an admin key) need none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import ServiceBinding
from opentinker_runtime.edge.convert import lease_from_proto
from opentinker_runtime.edge.handlers import servicer_base
from opentinker_runtime.auth.interceptor import current_principal
from opentinker_runtime.edge.errors import AdminKeyRequired
from opentinker_runtime.edge.job_token import job_token, presented_token
from opentinker_trainer import convert
from opentinker_trainer.sessions import SessionRegistry
from opentinker_trainer.shared_exports import SharedExports
from opentinker_trainer.trainer import Trainer

SERVICE = pb.DESCRIPTOR.services_by_name["TrainerService"]
SERVICE_FULL_NAME = SERVICE.full_name


class TrainerServicer(servicer_base(pb_grpc.TrainerServiceServicer, SERVICE)):  # type: ignore[misc]
    """Every TrainerService RPC over one Trainer."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def job_of_owner(self, session_id: str) -> str:
        return self.trainer.job_of_session(session_id)

    @job_token(lease="lease")
    async def CreateSession(self, request: pb.CreateSessionRequest, context: Any) -> pb.CreateSessionResponse:
        if request.peers and not current_principal().admin:  # this Trainer calls them with its own key
            raise AdminKeyRequired("CreateSession with peers (a job driver's call)", current_principal().tenant_id)
        view = await self.trainer.create_session(
            convert.session_spec(request), lease=lease_from_proto(request.lease), device_ids=list(request.device_ids),
            request=convert.request_key("CreateSession", request), peers=convert.replica_peers(request.peers),
            job_token=presented_token(context))
        return pb.CreateSessionResponse(session=convert.session_message(view))

    @job_token(lease="lease", admin_only="StartReplicas (a Trainer's call)")
    async def StartReplicas(self, request: pb.StartReplicasRequest, context: Any) -> pb.StartReplicasResponse:
        ranks = await self.trainer.start_replicas(lease_from_proto(request.lease), convert.replica_invite(request),
                                                  list(request.device_ids), request.session_id)
        return pb.StartReplicasResponse(ranks=ranks)

    @job_token(owner="session_id")
    async def GetSession(self, request: pb.GetSessionRequest, context: Any) -> pb.GetSessionResponse:
        return pb.GetSessionResponse(session=convert.session_message(self.trainer.session(request.session_id)))

    @job_token(lease="lease", owner="session_id")
    async def ForwardBackward(self, request: pb.ForwardBackwardRequest, context: Any) -> pb.ForwardBackwardResponse:
        result = await self.trainer.forward_backward(
            request.session_id, lease_from_proto(request.lease), [convert.datum(m) for m in request.datums],
            convert.loss_config(request.loss), request=convert.request_key("ForwardBackward", request))
        return pb.ForwardBackwardResponse(
            loss=result.loss, metrics={**result.metrics, **result.memory, **result.reported_cycle},
            num_tokens=result.num_tokens,
            logprobs=convert.token_logprobs_messages(result.logprobs))

    @job_token(lease="lease", owner="session_id")
    async def OptimStep(self, request: pb.OptimStepRequest, context: Any) -> pb.OptimStepResponse:
        adam = convert.adam_step(request.adam) if request.HasField("adam") else None
        result = await self.trainer.optim_step(request.session_id, lease_from_proto(request.lease),
                                               request.learning_rate, adam,
                                               request=convert.request_key("OptimStep", request))
        return pb.OptimStepResponse(step=result.step, policy_version=result.policy_version,
                                    grad_norm=result.grad_norm, learning_rate=result.learning_rate,
                                    metrics={**result.metrics, **result.memory})

    @job_token(owner="session_id")
    async def ComputeLogprobs(self, request: pb.ComputeLogprobsRequest, context: Any) -> pb.ComputeLogprobsResponse:
        rows = await self.trainer.compute_logprobs(
            request.session_id, [list(sequence.tokens) for sequence in request.sequences],
            reference=request.reference, temperature=request.temperature or 1.0)
        return pb.ComputeLogprobsResponse(logprobs=convert.token_logprobs_messages(rows))

    @job_token(lease="lease", owner="session_id")
    async def SaveCheckpoint(self, request: pb.SaveCheckpointRequest, context: Any) -> pb.SaveCheckpointResponse:
        record = await self.trainer.save_checkpoint(
            request.session_id, lease_from_proto(request.lease), format=convert.checkpoint_format(request.format),
            name=request.name, data_cursor=request.data_cursor, request=convert.request_key("SaveCheckpoint", request))
        return pb.SaveCheckpointResponse(checkpoint=convert.checkpoint_message(record))

    @job_token(lease="lease", owner="session_id")
    async def LoadCheckpoint(self, request: pb.LoadCheckpointRequest, context: Any) -> pb.LoadCheckpointResponse:
        cursor, view = await self.trainer.load_checkpoint(request.session_id, lease_from_proto(request.lease),
                                                          request.checkpoint_id, weights_only=request.weights_only)
        return pb.LoadCheckpointResponse(session=convert.session_message(view), data_cursor=cursor)

    @job_token(owner="session_id")
    async def ExportWeights(self, request: pb.ExportWeightsRequest,
                            context: Any) -> AsyncIterator[pb.ExportWeightsResponse]:
        chunk_bytes = convert.chunk_bytes(request.chunk_bytes)
        export = await self.trainer.export_weights(
            request.session_id, convert.weights_format(request.format),
            shared_memory=convert.shared_memory_requested(request.transport), chunk_bytes=chunk_bytes)
        yield pb.ExportWeightsResponse(header=convert.weights_header(export))
        for chunk in export.package.chunks:
            yield convert.chunk_response(chunk)

    @job_token(lease="lease", owner="session_id")
    async def CloseSession(self, request: pb.CloseSessionRequest, context: Any) -> pb.CloseSessionResponse:
        view = await self.trainer.close_session(request.session_id, lease_from_proto(request.lease))
        return pb.CloseSessionResponse(session=convert.session_message(view))


def trainer_service_binding(registry: SessionRegistry, shared: SharedExports | None = None) -> ServiceBinding:
    """The TrainerService to host, over `registry`, writing shared-memory exports with `shared`
    (None: always stream)."""
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=TrainerServicer(Trainer(registry, shared)),
                          add_to_server=pb_grpc.add_TrainerServiceServicer_to_server)
