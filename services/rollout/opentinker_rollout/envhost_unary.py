"""`EnvHostSession`: one EnvHost session played with unary RPCs (the service edge: grpc lives
here), and the target it plays on.

Every call carries the job's token and id as its only credential when there is a job (the
token the RunEpisodes call came with): the EnvHost may be a tenant's own, at an address the
tenant chose, and never sees the Rollout's key. Any RPC error becomes an `EnvironmentFailure`,
so the episode ends with ENV_ERROR and the others go on.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from opentinker_api.envhost.v1 import envhost_service_pb2 as envhost_pb2
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as envhost_grpc
from opentinker_runtime.core.errors import traceback_from_metadata
from opentinker_runtime.auth.job_tokens import job_call_metadata
from opentinker_rollout.environment import EnvironmentFailure, ResetResult, StepOutcome, with_traceback_tail

DEFAULT_CALL_TIMEOUT_S = 120.0


@dataclass(frozen=True, kw_only=True)
class EnvironmentTarget:
    """Which game to play and where (domain twin of common.v1.EnvironmentReference)."""

    address: str
    env_name: str
    config: Mapping[str, Any] = field(default_factory=dict)
    job_id: str = ""
    job_token: str = field(default="", repr=False)
    """The job's attempt token, forwarded on every EnvHost call ("" = none)."""


class EnvHostSession:
    """One EnvHost session, used by one episode at a time."""

    def __init__(self, stub: envhost_grpc.EnvHostServiceStub, target: EnvironmentTarget, *,
                 call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> None:
        self.stub = stub
        self.target = target
        self.call_timeout_s = call_timeout_s
        self.session_id = ""
        self.metadata = job_call_metadata(target.job_id, target.job_token) or None

    async def open(self) -> None:
        request = envhost_pb2.OpenSessionRequest(
            env_name=self.target.env_name, config=to_struct(self.target.config),
            request_id=uuid.uuid4().hex, job_id=self.target.job_id)
        response = await self._call("OpenSession", request)
        self.session_id = response.session_id

    async def reset(self, kwargs: Mapping[str, Any], seed: int) -> ResetResult:
        request = envhost_pb2.ResetRequest(session_id=self.session_id, kwargs=to_struct(kwargs),
                                           seed=seed)
        response = await self._call("Reset", request)
        return ResetResult(system_prompt=response.system_prompt,
                           initial_user_message=response.initial_user_message,
                           observation=response.observation, info=from_struct(response.info))

    async def step(self, action: str, *, truncated: bool = False) -> StepOutcome:
        request = envhost_pb2.StepRequest(session_id=self.session_id, action=action, truncated=truncated)
        response = await self._call("Step", request)
        return StepOutcome(observation=response.observation, reward=response.reward,
                           done=response.done, info=from_struct(response.info))

    async def close(self) -> None:
        if self.session_id:
            session_id, self.session_id = self.session_id, ""
            await self._call("CloseSession", envhost_pb2.CloseSessionRequest(session_id=session_id))

    async def _call(self, method: str, request: Any) -> Any:
        try:
            return await getattr(self.stub, method)(request, timeout=self.call_timeout_s, metadata=self.metadata)
        except grpc.aio.AioRpcError as error:
            summary = f"EnvHost {self.target.address} {method} failed: {error.code().name}: {error.details()}"
            traceback = traceback_from_metadata(error.trailing_metadata())
            raise EnvironmentFailure(with_traceback_tail(summary, traceback), traceback=traceback,
                                     status=error.code().name) from error


def to_struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(values))
    return struct


def from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    if not struct.fields:  # a step's or reset's info is most often empty: no json_format pass
        return {}
    return json_format.MessageToDict(struct)
