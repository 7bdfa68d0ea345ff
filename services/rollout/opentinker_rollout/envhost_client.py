"""The Rollout's EnvHost sessions (the service edge: grpc and stubs live here).

An episode plays Reset, Step... on a session, on a channel shared by every episode that plays on
the same EnvHost. Sessions outlive episodes (`envhost_sessions`): an episode takes a parked
session of its job's scope (or opens one) and gives it back, so OpenSession and CloseSession are
paid once per concurrent episode slot, not once per episode; a session whose call failed is
closed, never reused. Each session's calls go over an Interact stream of its own
(`envhost_interact`), or as unary RPCs (`envhost_unary`) to an EnvHost without Interact. A job's
episodes call with the job's token and id as their only credential (the token the RunEpisodes
call came with): the EnvHost may be a tenant's own, at an address the tenant chose, and never
sees the Rollout's key. Only episodes without a job (an admin's own RunEpisodes) call with the
Rollout's key. Any RPC error becomes an `EnvironmentFailure`, so the episode ends with ENV_ERROR
and the others go on; its text (the episode's `env_error`) is the failed call on one line
("EnvHost <address> Step failed: INTERNAL: ...") and, when the game raised, the tail of the game's
traceback after it (`environment.with_traceback_tail`: the last 20 lines, at most 4 KB), which the
Coordinator tells in the job's log.
"""

from __future__ import annotations

from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as envhost_grpc
from opentinker_runtime.core.channel_pool import ChannelPool
from opentinker_rollout.environment import EnvironmentSession
from opentinker_rollout.envhost_interact import InteractSession
from opentinker_rollout.envhost_sessions import PooledSession, SessionPools, SessionScope
from opentinker_rollout.envhost_unary import (
    DEFAULT_CALL_TIMEOUT_S,
    EnvHostSession,
    EnvironmentTarget,
    from_struct,
    to_struct,
)
from opentinker_rollout.episode import Episode

__all__ = ["DEFAULT_CALL_TIMEOUT_S", "EnvHostChannels", "EnvHostEnvironments", "EnvHostSession",
           "EnvironmentTarget", "InteractSession", "envhost_environments", "from_struct", "to_struct"]


class EnvHostChannels(ChannelPool):
    """Channels per EnvHost address, closed together: keyless ones for jobs' calls; and the
    sessions parked between episodes (closed first); and the addresses of EnvHosts found not
    to implement Interact."""

    def __init__(self, api_key: str = "", *, sessions: SessionPools | None = None) -> None:
        super().__init__(api_key)
        self.sessions = sessions or SessionPools()
        self.unary_only: set[str] = set()

    async def close(self) -> None:
        await self.sessions.close()
        await super().close()

    def stub(self, target: EnvironmentTarget) -> envhost_grpc.EnvHostServiceStub:
        """A job's calls go on a channel without the service key (they carry the job's token)."""
        channel = self.job_channel(target.address) if target.job_token else self.channel(target.address)
        return envhost_grpc.EnvHostServiceStub(channel)


def envhost_environments(channels: EnvHostChannels, target: EnvironmentTarget, *,
                         call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S, reuse_sessions: bool = True,
                         interact: bool = True) -> EnvHostEnvironments:
    """The sessions of one RunEpisodes call on `target` (every episode plays the same game; the
    episode only picks its reset kwargs and seed, at reset)."""
    return EnvHostEnvironments(channels, target, call_timeout_s=call_timeout_s, reuse_sessions=reuse_sessions,
                               interact=interact)


class EnvHostEnvironments:
    """An `EnvironmentFactory`: per episode a session taken from the channels' pools (or, with
    `reuse_sessions=False`, a fresh one opened and closed by the episode); its calls over an
    Interact stream of its own (or, with `interact=False`, as unary RPCs)."""

    def __init__(self, channels: EnvHostChannels, target: EnvironmentTarget, *,
                 call_timeout_s: float, reuse_sessions: bool, interact: bool) -> None:
        self.channels = channels
        self.target = target
        self.call_timeout_s = call_timeout_s
        self.reuse_sessions = reuse_sessions
        self.interact = interact
        self.scope = SessionScope.of(address=target.address, env_name=target.env_name, config=target.config,
                                     job_id=target.job_id, job_token=target.job_token)

    def __call__(self, episode: Episode) -> EnvironmentSession:
        if not self.reuse_sessions:
            return self._fresh()
        return PooledSession(self.channels.sessions, self.scope, self._fresh)

    async def aclose(self) -> None:
        """The call is over: a call without a job closes its sessions (a job's stay parked)."""
        await self.channels.sessions.end_call(self.scope)

    def _fresh(self) -> InteractSession | EnvHostSession:
        stub = self.channels.stub(self.target)
        if self.interact:
            return InteractSession(stub, self.target, unary_only=self.channels.unary_only,
                                   call_timeout_s=self.call_timeout_s)
        return EnvHostSession(stub, self.target, call_timeout_s=self.call_timeout_s)
