"""A Rollout and a stand-in EnvHost (CountingGame, unary RPCs only) served on free ports for the
gRPC tests, and the requests they send: load a policy, update its weights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import grpc
from google.protobuf import json_format

from opentinker_api.common.v1 import model_pb2, resources_pb2, weights_pb2
from opentinker_api.envhost.v1 import envhost_service_pb2 as env_pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as env_grpc
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import ServerPlan, ServiceBinding, start_server, stop_server
from opentinker_runtime.core.settings import ServiceSettings, port_setting
from opentinker_runtime.ml.weights import state_dict_to_package
from opentinker_rollout.main import build_plan
from opentinker_rollout.settings import RolloutSettings
from tests.rollout._support import MODEL_NAME


class CountingGame(env_grpc.EnvHostServiceServicer):
    """"count": two steps per episode, reward 1 each, done on the second. "broken": Reset fails."""

    def __init__(self) -> None:
        self.sessions: dict[str, list[str]] = {}
        self.resets: list[tuple[dict, int]] = []
        self.closed = 0

    async def OpenSession(self, request, context):
        session_id = f"s{len(self.sessions)}"
        self.sessions[session_id] = [request.env_name]
        return env_pb.OpenSessionResponse(session_id=session_id)

    async def Reset(self, request, context):
        if self.sessions[request.session_id][0] == "broken":
            await context.abort(grpc.StatusCode.INTERNAL, "the game raised ValueError: broken",
                                trailing_metadata=(("opentinker-traceback-bin", b"Traceback: broken"),))
        kwargs = json_format.MessageToDict(request.kwargs)
        self.resets.append((kwargs, request.seed))
        return env_pb.ResetResponse(system_prompt="Count with me.", initial_user_message="Ready?",
                                    observation=f"Start at {kwargs['start']:.0f}.")

    async def Step(self, request, context):
        steps = self.sessions[request.session_id]
        steps.append(request.action)
        done = len(steps) == 3
        response = env_pb.StepResponse(observation="" if done else "Next.", reward=1.0, done=done)
        if done:
            response.info.update({"correct": True})
        return response

    async def CloseSession(self, request, context):
        self.closed += 1
        return env_pb.CloseSessionResponse(steps=len(self.sessions[request.session_id]) - 1)


@dataclass(frozen=True, kw_only=True)
class EnvSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TESTENV_"
    port: int = port_setting(0)


async def with_servers(scenario, tmp_path):
    game = CountingGame()
    env_binding = ServiceBinding(full_name="opentinker.envhost.v1.EnvHostService", servicer=game,
                                 add_to_server=env_grpc.add_EnvHostServiceServicer_to_server)
    env_server = await start_server(EnvSettings(auth="disabled"), ServerPlan(services=[env_binding]))
    settings = RolloutSettings(auth="disabled", port=0, checkpoint_dir=tmp_path, max_batch_size=16,
                               envhost_address=f"127.0.0.1:{env_server.port}")
    plan = await build_plan(settings)
    rollout_server = await start_server(settings, plan)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{rollout_server.port}") as channel:
            return await scenario(pb_grpc.RolloutServiceStub(channel), game)
    finally:
        await stop_server(rollout_server, grace_seconds=1)
        for hook in plan.close_hooks:
            await hook()
        await stop_server(env_server, grace_seconds=1)


LEASE = resources_pb2.LeaseContext(job_id="job-7", lease_id="l1", fencing_token=3)


async def load(stub, lora=True, **kwargs):
    adaptation = model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=4, alpha=8.0)) if lora else None
    request = pb.LoadModelRequest(
        request_id="load-1", lease=LEASE, adaptation=adaptation,
        model=model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=MODEL_NAME, seed=0)), **kwargs)
    return (await stub.LoadModel(request)).policy


def weights_requests(policy_id, state_dict, version, lease=LEASE):
    package = state_dict_to_package(state_dict, chunk_bytes=8192)
    header = weights_pb2.WeightsHeader(
        format=weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER, policy_version=version,
        total_bytes=package.total_bytes, sha256=package.sha256,
        tensors=[weights_pb2.TensorSpec(name=s.name, dtype=weights_pb2.TENSOR_DTYPE_FLOAT32,
                                        shape=list(s.shape), byte_length=s.byte_length)
                 for s in package.specs])
    yield pb.UpdateWeightsRequest(target=pb.UpdateWeightsTarget(policy_id=policy_id, lease=lease))
    yield pb.UpdateWeightsRequest(header=header)
    for chunk in package.chunks:
        yield pb.UpdateWeightsRequest(chunk=weights_pb2.WeightsChunk(
            tensor_name=chunk.tensor_name, offset=chunk.offset, data=chunk.data))
