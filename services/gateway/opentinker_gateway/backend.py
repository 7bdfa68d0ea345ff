"""gRPC calls on a SESSION job's Trainer and Rollout (the gateway's only gRPC client code besides
`session_jobs`). Every call carries the stack's service key and the job's token and id, like a
Coordinator's; errors come back as the gateway's own (HTTP) errors.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format

from opentinker_api.common.v1 import algorithm_pb2, datum_pb2, model_pb2, resources_pb2, sampling_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as rollout_grpc
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as trainer_grpc
from opentinker_api.common.v1 import weights_pb2
from opentinker_runtime.core.channel_pool import ChannelPool
from opentinker_runtime.auth.job_tokens import job_call_metadata
from opentinker_gateway.errors import BadRequest, Conflict, GatewayError, NotFound, Unauthorized, Unavailable

USER_CODES = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.FAILED_PRECONDITION}


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a SESSION job's devices are, and its credentials."""

    job_id: str
    job_token: str
    trainer_address: str
    trainer_lease: resources_pb2.LeaseContext
    trainer_devices: tuple[str, ...]
    rollout_address: str
    trainer_peers: tuple[trainer_pb.ReplicaPeer, ...] = ()
    """The job's Trainer devices on other workers (data-parallel ranks rank 0's Trainer starts)."""
    rollout_lease: resources_pb2.LeaseContext


def gateway_error(error: grpc.aio.AioRpcError, what: str) -> GatewayError:
    code, details = error.code(), error.details() or ""
    message = f"{what}: {details}"
    if code in USER_CODES:
        return BadRequest(message)
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(message)
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return Conflict(message)
    if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
        return Unauthorized(message)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return Unavailable(message)
    return GatewayError(f"{message} ({code.name})")


def message(value: dict[str, Any], cls: type) -> Any:
    return json_format.ParseDict(value, cls())


class JobBackend:
    """The Trainer and Rollout calls of one SESSION job."""

    def __init__(self, pool: ChannelPool, placement: Placement, *, timeout: float) -> None:
        self.placement = placement
        self.timeout = timeout
        self.metadata = job_call_metadata(placement.job_id, placement.job_token)
        self.trainer = (trainer_grpc.TrainerServiceStub(pool.channel(placement.trainer_address))
                        if placement.trainer_address else None)  # a sampler-only job has no Trainer
        self.rollout = rollout_grpc.RolloutServiceStub(pool.channel(placement.rollout_address))

    async def _call(self, method: Any, request: Any, what: str) -> Any:
        try:
            return await method(request, timeout=self.timeout, metadata=self.metadata)
        except grpc.aio.AioRpcError as error:
            raise gateway_error(error, what) from None

    # ------------------------------------------------------------ Trainer

    async def create_session(self, model: dict, adaptation: dict, seed: int) -> trainer_pb.Session:
        request = trainer_pb.CreateSessionRequest(
            request_id=_request_id(), lease=self.placement.trainer_lease, base_model=message(model, model_pb2.ModelReference),
            adaptation=message(adaptation, model_pb2.Adaptation), seed=seed,
            optimizer=algorithm_pb2.OptimizerConfig(learning_rate=1e-4, beta2=0.95, epsilon=1e-12),
            device_ids=list(self.placement.trainer_devices), peers=list(self.placement.trainer_peers))
        return (await self._call(self.trainer.CreateSession, request, "create_model")).session

    async def forward_backward(self, session_id: str, datums: Sequence[datum_pb2.Datum], loss: dict,
                               request_id: str) -> trainer_pb.ForwardBackwardResponse:
        request = trainer_pb.ForwardBackwardRequest(
            session_id=session_id, lease=self.placement.trainer_lease, datums=list(datums),
            loss=message(loss, algorithm_pb2.LossConfig), request_id=request_id)
        return await self._call(self.trainer.ForwardBackward, request, "forward_backward")

    async def logprobs(self, session_id: str, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        request = trainer_pb.ComputeLogprobsRequest(
            session_id=session_id, sequences=[datum_pb2.TokenSequence(tokens=list(s)) for s in sequences])
        response = await self._call(self.trainer.ComputeLogprobs, request, "forward")
        return [list(item.logprobs) for item in response.logprobs]

    async def optim_step(self, session_id: str, adam: dict, request_id: str) -> trainer_pb.OptimStepResponse:
        request = trainer_pb.OptimStepRequest(session_id=session_id, lease=self.placement.trainer_lease,
                                              request_id=request_id,
                                              adam=message(adam, algorithm_pb2.AdamStepParams))
        return await self._call(self.trainer.OptimStep, request, "optim_step")

    async def save_checkpoint(self, session_id: str, name: str, request_id: str) -> trainer_pb.Checkpoint:
        request = trainer_pb.SaveCheckpointRequest(
            session_id=session_id, lease=self.placement.trainer_lease, name=name, request_id=request_id,
            format=trainer_pb.CHECKPOINT_FORMAT_TRAINING_STATE)
        return (await self._call(self.trainer.SaveCheckpoint, request, "save_weights")).checkpoint

    async def load_checkpoint(self, session_id: str, checkpoint_id: str, *, keep_optimizer: bool) -> trainer_pb.Session:
        request = trainer_pb.LoadCheckpointRequest(session_id=session_id, lease=self.placement.trainer_lease,
                                                   checkpoint_id=checkpoint_id, weights_only=not keep_optimizer)
        return (await self._call(self.trainer.LoadCheckpoint, request, "load_weights")).session

    async def close_session(self, session_id: str) -> None:
        request = trainer_pb.CloseSessionRequest(session_id=session_id, lease=self.placement.trainer_lease)
        await self._call(self.trainer.CloseSession, request, "close")

    def export_weights(self, session_id: str) -> Any:
        request = trainer_pb.ExportWeightsRequest(session_id=session_id,
                                                  format=weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER)
        return self.trainer.ExportWeights(request, timeout=self.timeout, metadata=self.metadata)

    # ------------------------------------------------------------ Rollout

    async def load_policy(self, model: dict, adaptation: dict) -> rollout_pb.Policy:
        request = rollout_pb.LoadModelRequest(
            request_id=_request_id(), lease=self.placement.rollout_lease,
            model=message(model, model_pb2.ModelReference), adaptation=message(adaptation, model_pb2.Adaptation))
        return (await self._call(self.rollout.LoadModel, request, "create_sampling_session")).policy

    async def push_weights(self, policy_id: str, session_id: str) -> rollout_pb.Policy:
        """Stream the Trainer session's current adapter into the Rollout policy."""
        exported = self.export_weights(session_id)

        async def stream() -> AsyncIterator[rollout_pb.UpdateWeightsRequest]:
            yield rollout_pb.UpdateWeightsRequest(target=rollout_pb.UpdateWeightsTarget(
                policy_id=policy_id, lease=self.placement.rollout_lease))
            async for item in exported:
                if item.HasField("header"):
                    yield rollout_pb.UpdateWeightsRequest(header=item.header)
                else:
                    yield rollout_pb.UpdateWeightsRequest(chunk=item.chunk)

        try:
            response = await self.rollout.UpdateWeights(stream(), timeout=self.timeout, metadata=self.metadata)
        except grpc.aio.AioRpcError as error:
            raise gateway_error(error, "save_weights_for_sampler") from None
        return response.policy

    async def sample(self, policy_id: str, prompt: Sequence[int], sampling: sampling_pb2.SamplingParams,
                     prompt_logprobs: bool) -> rollout_pb.PromptCompletions:
        request = rollout_pb.SampleRequest(
            policy_id=policy_id, sampling=sampling,
            prompts=[rollout_pb.Prompt(tokens=datum_pb2.TokenSequence(tokens=list(prompt)))])
        if prompt_logprobs:
            request.prompt_logprobs = True
        return (await self._call(self.rollout.Sample, request, "sample")).results[0]

    async def unload_policy(self, policy_id: str) -> None:
        request = rollout_pb.UnloadModelRequest(policy_id=policy_id, lease=self.placement.rollout_lease)
        await self._call(self.rollout.UnloadModel, request, "unload")


def _request_id() -> str:
    return uuid.uuid4().hex
