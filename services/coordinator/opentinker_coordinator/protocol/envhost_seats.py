"""`SeatedEnvironment` over the EnvHostService (the service edge: grpc lives here).

A match owns one EnvHost session: OpenSession + Reset when it starts, Step(seat) per action,
CloseSession at the end. A job's match calls carry the job's token and id as their only credential
(`job_tokens`, filled by the launcher for each job it drives), on a channel without the
Coordinator's key: the EnvHost may be a tenant's own. A match without a job (an admin's own
OpenMatch) calls with the Coordinator's key. Any RPC error becomes `EnvironmentBroke` (the match is aborted).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from opentinker_api.envhost.v1 import envhost_service_pb2 as envhost_pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as envhost_grpc
from opentinker_runtime.core.channel_pool import ChannelPool
from opentinker_runtime.core.errors import traceback_from_metadata
from opentinker_runtime.auth.job_tokens import job_call_metadata
from opentinker_coordinator.protocol.seated_environment import (
    EnvironmentBroke,
    MatchEnvironmentRef,
    SeatedEnvironmentFactory,
    SeatedStart,
    SeatedStep,
)

CALL_TIMEOUT_S = 120.0


class EnvHostChannels(ChannelPool):
    """One channel per EnvHost address (a match's environment may name its own), closed together."""

    def __init__(self, default_address: str, api_key: str = "") -> None:
        super().__init__(api_key)
        self.default_address = default_address
        self.job_tokens: dict[str, str] = {}
        """job id -> its current attempt's token (sent as x-opentinker-job-token)."""

    def stub(self, address: str, *, for_job: bool) -> envhost_grpc.EnvHostServiceStub:
        address = address or self.default_address
        return envhost_grpc.EnvHostServiceStub(self.job_channel(address) if for_job else self.channel(address))

    def factory(self) -> SeatedEnvironmentFactory:
        def make(environment: MatchEnvironmentRef, job_id: str) -> EnvHostSeatedEnvironment:
            metadata = job_call_metadata(job_id, self.job_tokens.get(job_id, ""))
            stub = self.stub(environment.envhost_address, for_job=bool(metadata))
            return EnvHostSeatedEnvironment(stub, environment, job_id, metadata)
        return make


class EnvHostSeatedEnvironment:
    def __init__(self, stub: envhost_grpc.EnvHostServiceStub, environment: MatchEnvironmentRef,
                 job_id: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.stub, self.environment, self.job_id = stub, environment, job_id
        self.metadata = metadata
        self.session_id = ""

    async def start(self, reset_kwargs: Mapping[str, Any], seed: int) -> SeatedStart:
        opened = await self._call("OpenSession", envhost_pb.OpenSessionRequest(
            env_name=self.environment.env_name, config=_struct(self.environment.config),
            request_id=uuid.uuid4().hex, job_id=self.job_id))
        self.session_id = opened.session_id
        reset = await self._call("Reset", envhost_pb.ResetRequest(
            session_id=self.session_id, kwargs=_struct(reset_kwargs), seed=seed))
        return SeatedStart(seats=tuple(opened.environment.seats), system_prompt=reset.system_prompt,
                           initial_user_message=reset.initial_user_message, observation=reset.observation)

    async def step(self, action: str, seat: str) -> SeatedStep:
        response = await self._call("Step", envhost_pb.StepRequest(session_id=self.session_id, action=action,
                                                                   seat=seat))
        return SeatedStep(observation=response.observation, reward=response.reward, done=response.done,
                          info=json_format.MessageToDict(response.info))

    async def close(self) -> None:
        if self.session_id:
            session_id, self.session_id = self.session_id, ""
            await self._call("CloseSession", envhost_pb.CloseSessionRequest(session_id=session_id))

    async def _call(self, method: str, request: Any) -> Any:
        try:
            return await getattr(self.stub, method)(request, timeout=CALL_TIMEOUT_S, metadata=self.metadata)
        except grpc.aio.AioRpcError as error:
            raise EnvironmentBroke(f"EnvHost {method} failed: {error.code().name}: {error.details()}",
                                   traceback=traceback_from_metadata(error.trailing_metadata()),
                                   unreachable=error.code() == grpc.StatusCode.UNAVAILABLE,
                                   host_code=error.code().name, host_details=error.details() or "") from error


def _struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(values))
    return struct

