"""`EnvironmentSession` over the EnvHostService (the service edge: grpc and stubs live here).

An episode plays Reset, Step... on a session as unary calls, on a channel shared by every episode
that plays on the same EnvHost. Sessions outlive episodes (`envhost_sessions`): an episode takes
a parked session of its job's scope (or opens one) and gives it back, so OpenSession and
CloseSession are paid once per concurrent episode slot, not once per episode; a session whose
call failed is closed, never reused. A job's episodes call with the
job's token and id as their only credential (the token the RunEpisodes call came with): the
EnvHost may be a tenant's own, at an address the tenant chose, and never sees the Rollout's key.
Only episodes without a job (an admin's own RunEpisodes) call with the Rollout's key. Any RPC error becomes an
`EnvironmentFailure`, so the episode ends with ENV_ERROR and the others go on.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from opentinker.api.envhost.v1 import envhost_service_pb2 as envhost_pb2
from opentinker.api.envhost.v1 import envhost_service_pb2_grpc as envhost_grpc
from opentinker.core.errors import traceback_from_metadata
from opentinker.core.job_tokens import job_call_metadata
from opentinker.core.channel_pool import ChannelPool
from opentinker_rollout.environment import (
    EnvironmentFailure,
    EnvironmentSession,
    ResetResult,
    StepOutcome,
)
from opentinker_rollout.envhost_sessions import PooledSession, SessionPools, SessionScope
from opentinker_rollout.episode import Episode

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


class EnvHostChannels(ChannelPool):
    """Channels per EnvHost address, closed together: keyless ones for jobs' calls; and the
    sessions parked between episodes (closed first)."""

    def __init__(self, api_key: str = "", *, sessions: SessionPools | None = None) -> None:
        super().__init__(api_key)
        self.sessions = sessions or SessionPools()

    async def close(self) -> None:
        await self.sessions.close()
        await super().close()

    def stub(self, target: EnvironmentTarget) -> envhost_grpc.EnvHostServiceStub:
        """A job's calls go on a channel without the service key (they carry the job's token)."""
        channel = self.job_channel(target.address) if target.job_token else self.channel(target.address)
        return envhost_grpc.EnvHostServiceStub(channel)


def envhost_environments(channels: EnvHostChannels, target: EnvironmentTarget, *,
                         call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                         reuse_sessions: bool = True) -> EnvHostEnvironments:
    """The sessions of one RunEpisodes call on `target` (every episode plays the same game; the
    episode only picks its reset kwargs and seed, at reset)."""
    return EnvHostEnvironments(channels, target, call_timeout_s=call_timeout_s, reuse_sessions=reuse_sessions)


class EnvHostEnvironments:
    """An `EnvironmentFactory`: per episode a session taken from the channels' pools (or, with
    `reuse_sessions=False`, a fresh one opened and closed by the episode)."""

    def __init__(self, channels: EnvHostChannels, target: EnvironmentTarget, *,
                 call_timeout_s: float, reuse_sessions: bool) -> None:
        self.channels = channels
        self.target = target
        self.call_timeout_s = call_timeout_s
        self.reuse_sessions = reuse_sessions
        self.scope = SessionScope.of(address=target.address, env_name=target.env_name, config=target.config,
                                     job_id=target.job_id, job_token=target.job_token)

    def __call__(self, episode: Episode) -> EnvironmentSession:
        if not self.reuse_sessions:
            return self._fresh()
        return PooledSession(self.channels.sessions, self.scope, self._fresh)

    async def aclose(self) -> None:
        """The call is over: a call without a job closes its sessions (a job's stay parked)."""
        await self.channels.sessions.end_call(self.scope)

    def _fresh(self) -> EnvHostSession:
        return EnvHostSession(self.channels.stub(self.target), self.target, call_timeout_s=self.call_timeout_s)


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

    async def step(self, action: str) -> StepOutcome:
        request = envhost_pb2.StepRequest(session_id=self.session_id, action=action)
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
            raise EnvironmentFailure(
                f"EnvHost {self.target.address} {method} failed: {error.code().name}: "
                f"{error.details()}", traceback=traceback_from_metadata(error.trailing_metadata())) from error



def to_struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(values))
    return struct


def from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(struct)
