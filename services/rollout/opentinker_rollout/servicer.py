"""The RolloutService servicer: protobuf -> the `Rollout`'s operations -> protobuf, nothing else.

Errors are the Rollout's DomainErrors, mapped by the service edge (`opentinker_runtime.edge`):
INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION with a message naming the field and the
ErrorReason name in `opentinker-reason`. RunEpisodes reports a crashed episode as an `error`
item and keeps streaming; environment failures arrive as trajectories with STOP_REASON_ENV_ERROR.

Every call with a job's lease, or on a job's policy, must carry the job's current attempt token
(the `job_token` declarations); RunEpisodes forwards it on its environment calls. Policies
loaded without a job (Tinker-style primitives with an admin key) need none.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import grpc

from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import ServiceBinding
from opentinker_runtime.edge.convert import lease_from_proto
from opentinker_runtime.edge.handlers import servicer_base
from opentinker_runtime.edge.job_token import job_token, presented_token
from opentinker_rollout import convert
from opentinker_rollout.rollout import Rollout

SERVICE = pb.DESCRIPTOR.services_by_name["RolloutService"]
SERVICE_FULL_NAME = SERVICE.full_name


class RolloutServicer(servicer_base(pb_grpc.RolloutServiceServicer, SERVICE)):  # type: ignore[misc]
    def __init__(self, rollout: Rollout) -> None:
        self.rollout = rollout

    def job_of_owner(self, policy_id: str) -> str:
        return self.rollout.job_of_policy(policy_id)

    @job_token(lease="lease")
    async def LoadModel(self, request: pb.LoadModelRequest, context: grpc.aio.ServicerContext) -> pb.LoadModelResponse:
        return pb.LoadModelResponse(policy=convert.policy(await self.rollout.load(convert.load_request(request))))

    @job_token(lease="lease", owner="policy_id")
    async def UnloadModel(self, request: pb.UnloadModelRequest,
                          context: grpc.aio.ServicerContext) -> pb.UnloadModelResponse:
        info = await self.rollout.unload(request.policy_id, lease_from_proto(request.lease))
        return pb.UnloadModelResponse(policy=convert.policy(info))

    @job_token(lease="target.lease", owner="target.policy_id")
    async def UpdateWeights(self, request_iterator: AsyncIterable[pb.UpdateWeightsRequest],
                            context: grpc.aio.ServicerContext) -> pb.UpdateWeightsResponse:
        stream = aiter(request_iterator)
        target = await convert.weights_target(stream)
        header = convert.weights_header(await convert.weights_header_message(stream))
        info, received = await self.rollout.update_weights(target.policy_id, lease_from_proto(target.lease), header,
                                                           convert.weight_chunks(stream))
        return pb.UpdateWeightsResponse(policy=convert.policy(info), bytes_received=received)

    @job_token(owner="policy_id")
    async def Sample(self, request: pb.SampleRequest, context: grpc.aio.ServicerContext) -> pb.SampleResponse:
        results = await self.rollout.sample(request.policy_id, convert.prompts(request),
                                            convert.sampling_config(request.sampling),
                                            prompt_logprobs=request.prompt_logprobs)
        return convert.sample_response(results)

    @job_token(lease="lease", owner="policy_id")
    async def RunEpisodes(self, request: pb.RunEpisodesRequest,
                          context: grpc.aio.ServicerContext) -> AsyncIterator[pb.RunEpisodesResponse]:
        async for result in self.rollout.run_episodes(convert.episode_run(request), presented_token(context)):
            yield convert.run_episodes_item(result)


def rollout_service_binding(servicer: RolloutServicer) -> ServiceBinding:
    """The RolloutService to host."""
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=servicer,
                          add_to_server=pb_grpc.add_RolloutServiceServicer_to_server)
