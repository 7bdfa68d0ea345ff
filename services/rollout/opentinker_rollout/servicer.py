"""The RolloutService servicer: converts protobuf <-> domain objects around the PolicyRegistry.

Errors: a domain error becomes its status code (INVALID_ARGUMENT, NOT_FOUND,
FAILED_PRECONDITION) with a message naming the field and the ErrorReason name in trailing
metadata `opentinker-reason` (as the EnvHost does). RunEpisodes reports a crashed episode as
an `error` item and keeps streaming; environment failures arrive as trajectories with
STOP_REASON_ENV_ERROR.

RunEpisodes plays single-agent episodes on an EnvHost (`environment` names the game), or, when
its EpisodeSpecs name matches, seats of matches on the Coordinator at `coordinator_address`
as `agent_id` (the match knows its game, so `environment` is not needed then; every match
episode of the call runs at once, whatever `max_concurrent_episodes` says).

Every call with a job's lease, or on a job's policy, must carry the job's current attempt token
(`opentinker_runtime.auth.job_token_guard`); RunEpisodes forwards it on its EnvHost calls. Policies
loaded without a job (Tinker-style primitives with an admin key) need none.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

import grpc

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.job_token_guard import require_job_token
from opentinker_runtime.auth.job_tokens import presented_job_token
from opentinker_runtime.core.server import ServiceBinding
from opentinker_rollout import convert
from opentinker_rollout.envhost_client import EnvHostChannels, EnvironmentTarget, envhost_environments
from opentinker_rollout.environment import EnvironmentFactory
from opentinker_rollout.errors import InvalidArgument, NotFound, RolloutError
from opentinker_rollout.match_client import CoordinatorChannels, match_environments
from opentinker_rollout.policies import LoadedPolicy, PolicyRegistry, WeightsChunk
from opentinker_rollout.runner import EpisodeBatch, EpisodeServices, run_episodes
from opentinker_rollout.sampler import sample
from opentinker_runtime.core.errors import REASON_METADATA_KEY

SERVICE_FULL_NAME = pb.DESCRIPTOR.services_by_name["RolloutService"].full_name


def status_code(error: RolloutError) -> grpc.StatusCode:
    if isinstance(error, InvalidArgument):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(error, NotFound):
        return grpc.StatusCode.NOT_FOUND
    return grpc.StatusCode.FAILED_PRECONDITION


async def abort_with(context: grpc.aio.ServicerContext, error: RolloutError) -> None:
    await context.abort(status_code(error), str(error),
                        trailing_metadata=((REASON_METADATA_KEY, f"ERROR_REASON_{error.reason}"),))


def answers_domain_errors(rpc: Callable[..., Any]) -> Callable[..., Any]:
    """Unary-response RPCs: abort with the domain error's code, message and reason."""
    @functools.wraps(rpc)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await rpc(self, request, context)
        except RolloutError as error:
            await abort_with(context, error)
    return wrapper


class RolloutServicer(pb_grpc.RolloutServiceServicer):
    def __init__(self, registry: PolicyRegistry, channels: EnvHostChannels, *,
                 default_envhost_address: str, max_concurrent_episodes: int = 64,
                 coordinator_channels: CoordinatorChannels | None = None) -> None:
        self.registry = registry
        self.channels = channels
        self.coordinator_channels = coordinator_channels or CoordinatorChannels()
        self.default_envhost_address = default_envhost_address
        self.max_concurrent_episodes = max_concurrent_episodes

    async def _job_token(self, context: grpc.aio.ServicerContext, *,
                         lease: resources_pb2.LeaseContext | None = None, policy_id: str = "",
                         prefix: str = "") -> None:
        """The job token check: of the lease's job and attempt, else of the policy's job.
        `prefix` is where the lease and policy_id sit in the request ("target." for UpdateWeights)."""
        if lease is not None and lease.job_id:
            await require_job_token(context, job_id=lease.job_id, fencing_token=lease.fencing_token,
                                    field=f"{prefix}lease.job_id")
        elif policy_id:
            await require_job_token(context, job_id=self.registry.get(policy_id).job_id, field=f"{prefix}policy_id")

    @answers_domain_errors
    async def LoadModel(self, request: pb.LoadModelRequest,
                        context: grpc.aio.ServicerContext) -> pb.LoadModelResponse:
        await self._job_token(context, lease=request.lease)
        info = await self.registry.load(convert.load_request(request))
        return pb.LoadModelResponse(policy=convert.policy(info))

    @answers_domain_errors
    async def UnloadModel(self, request: pb.UnloadModelRequest,
                          context: grpc.aio.ServicerContext) -> pb.UnloadModelResponse:
        await self._job_token(context, lease=request.lease, policy_id=request.policy_id)
        info = await self.registry.unload(request.policy_id, convert.lease(request.lease))
        # The job is ending: close its parked EnvHost sessions while its token still opens them.
        await self.channels.sessions.job_stopped(info.job_id)
        return pb.UnloadModelResponse(policy=convert.policy(info))

    @answers_domain_errors
    async def UpdateWeights(self, request_iterator: AsyncIterable[pb.UpdateWeightsRequest],
                            context: grpc.aio.ServicerContext) -> pb.UpdateWeightsResponse:
        stream = aiter(request_iterator)
        target = await _expect(stream, "target", "the first message must be a target")
        if not target.policy_id:
            raise InvalidArgument("target.policy_id", "is required")
        await self._job_token(context, lease=target.lease, policy_id=target.policy_id, prefix="target.")
        header = await _expect(stream, "header", "the second message must be a header")
        info, received = await self.registry.update_weights(
            target.policy_id, convert.lease(target.lease), convert.weights_header(header),
            _chunks(stream))
        return pb.UpdateWeightsResponse(policy=convert.policy(info), bytes_received=received)

    @answers_domain_errors
    async def Sample(self, request: pb.SampleRequest,
                     context: grpc.aio.ServicerContext) -> pb.SampleResponse:
        await self._job_token(context, policy_id=request.policy_id)
        policy = self.registry.get(request.policy_id)
        results = await sample(policy, convert.prompts(request), convert.sampling_config(request.sampling),
                               prompt_logprobs=request.prompt_logprobs)
        return convert.sample_response(results)

    async def RunEpisodes(self, request: pb.RunEpisodesRequest,
                          context: grpc.aio.ServicerContext) -> AsyncIterator[pb.RunEpisodesResponse]:
        try:
            await self._job_token(context, lease=request.lease, policy_id=request.policy_id)
            job_token = presented_job_token(context.invocation_metadata() or ())
            batch, services = self._episode_plan(request, job_token)
        except RolloutError as error:
            await abort_with(context, error)
            return
        async for result in run_episodes(batch, services):
            yield convert.run_episodes_item(result)

    def _episode_plan(self, request: pb.RunEpisodesRequest, job_token: str) -> tuple[EpisodeBatch, EpisodeServices]:
        policy = self.registry.get(request.policy_id)
        lease = convert.lease(request.lease)
        self.registry.check_lease(policy, lease)
        specs = convert.episode_specs(request)
        batch = EpisodeBatch(specs=specs, group_size=request.group_size or 1,
                             sampling=convert.sampling_config(request.sampling),
                             limits=convert.episode_limits(request.limits),
                             max_concurrency=self._concurrency(request, len(specs)),
                             agent_id=request.agent_id)
        return batch, self._episode_services(policy, request, lease.job_id, job_token)

    def _concurrency(self, request: pb.RunEpisodesRequest, episodes: int) -> int:
        """Match episodes all run at once: a seat waiting for its turn holds its slot, so a bound
        could leave every slot waiting on matches whose other seats wait for this call's queued
        ones (agents calling with their matches in different orders). Waiting costs no compute:
        generation is bounded by the batcher."""
        return max(episodes, 1) if convert.plays_matches(request) else self.max_concurrent_episodes

    def _episode_services(self, policy: LoadedPolicy, request: pb.RunEpisodesRequest,
                          job_id: str, job_token: str) -> EpisodeServices:
        return EpisodeServices(generator=policy.generator, renderer=policy.renderer,
                               environments=self._environments(request, job_id, job_token),
                               max_context_length=policy.engine.max_context_length)

    def _environments(self, request: pb.RunEpisodesRequest, job_id: str, job_token: str) -> EnvironmentFactory:
        """Seats of Coordinator matches, or sessions of the EnvHost game `environment` names
        (called with the job's token)."""
        if convert.plays_matches(request):
            return match_environments(self.coordinator_channels, request.coordinator_address, job_token=job_token)
        environment = request.environment
        if not environment.env_name:
            raise InvalidArgument("environment.env_name", "is required (unless the episodes play "
                                  "Coordinator matches: EpisodeSpec.match_id)")
        target = EnvironmentTarget(address=environment.envhost_address or self.default_envhost_address,
                                   env_name=environment.env_name,
                                   config=convert.from_struct(environment.config), job_id=job_id,
                                   job_token=job_token)
        return envhost_environments(self.channels, target)


async def _expect(stream: AsyncIterator[pb.UpdateWeightsRequest], kind: str, problem: str) -> Any:
    message = await anext(stream, None)
    if message is None or message.WhichOneof("item") != kind:
        raise InvalidArgument(kind, problem)
    return getattr(message, kind)


async def _chunks(stream: AsyncIterator[pb.UpdateWeightsRequest]) -> AsyncIterator[WeightsChunk]:
    async for message in stream:
        if message.WhichOneof("item") != "chunk":
            raise InvalidArgument("chunk", "after the header, every message must be a chunk")
        yield WeightsChunk(tensor_name=message.chunk.tensor_name, offset=message.chunk.offset,
                           data=message.chunk.data)


def rollout_service_binding(servicer: RolloutServicer) -> ServiceBinding:
    """The RolloutService to host."""
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=servicer,
                          add_to_server=pb_grpc.add_RolloutServiceServicer_to_server)
