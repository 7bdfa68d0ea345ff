"""`EnvironmentSession` over a Coordinator match: one seat of a multi-agent game, played by one
agent (the service edge: grpc and the Coordinator stubs live here).

    reset: JoinMatch(match, agent, seat) -> the opening texts; AwaitTurn -> the first observation
    step:  SubmitAction(turn granted last) -> the action's reward; AwaitTurn -> the next turn
    close: LeaveMatch when the match is not over (the Coordinator scores that as a forfeit)

AwaitTurn blocks while the other seats think, so it has a long per-call timeout of its own;
the episode's wall-clock limit is what bounds a whole match episode. A match that ended
before this seat's first turn makes reset answer `done` (with the seat's reward and outcome).
A step's reward is the action's own plus what the other seats' actions gave this seat until
its next turn (e.g. -1 when the opponent's reply wins), so a seat's trajectory adds up to the
match's total for that seat. SubmitAction's `request_id` is fixed per (match, agent, turn), so
a retried call cannot play a second move.

Any RPC error becomes `EnvironmentFailure` (the episode ends ENV_ERROR), e.g. ABORTED with
reason AGENT_LOST when the match was aborted because another agent's worker was lost.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import grpc

from opentinker_api.coordinator.v1 import coordinator_service_pb2 as coordinator_pb2
from opentinker_api.coordinator.v1 import coordinator_service_pb2_grpc as coordinator_grpc
from opentinker_runtime.core.errors import reason_from_metadata, traceback_from_metadata
from opentinker_runtime.auth.job_tokens import JOB_TOKEN_METADATA_KEY
from opentinker_runtime.core.channel_pool import ChannelPool
from opentinker_rollout.environment import (
    EnvironmentFactory,
    EnvironmentFailure,
    ResetResult,
    StepOutcome,
)
from opentinker_rollout.episode import Episode

DEFAULT_CALL_TIMEOUT_S = 120.0
"""JoinMatch and SubmitAction (which steps the game on its EnvHost)."""
AWAIT_TURN_TIMEOUT_S = 600.0
"""AwaitTurn waits for the other seats' moves; the episode's own time limit usually ends first."""
LEAVE_TIMEOUT_S = 5.0


class CoordinatorChannels(ChannelPool):
    """One aio channel per Coordinator address (sending `api_key` on every call), closed together."""

    def stub(self, address: str) -> coordinator_grpc.CoordinatorServiceStub:
        return coordinator_grpc.CoordinatorServiceStub(self.channel(address))


def match_environments(channels: CoordinatorChannels, coordinator_address: str, *,
                       call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                       await_timeout_s: float = AWAIT_TURN_TIMEOUT_S, job_token: str = "") -> EnvironmentFactory:
    """A factory of sessions for match episodes: each plays its episode's match and seat as
    the episode's agent, on the Coordinator at `coordinator_address`; every call carries the
    job's token (the one RunEpisodes came with) when there is one."""
    metadata = ((JOB_TOKEN_METADATA_KEY, job_token),) if job_token else ()

    def make(episode: Episode) -> MatchSession:
        return MatchSession(channels.stub(coordinator_address), address=coordinator_address,
                            match_id=episode.match_id, seat=episode.seat, agent_id=episode.agent_id,
                            call_timeout_s=call_timeout_s, await_timeout_s=await_timeout_s, metadata=metadata)
    return make


class MatchSession:
    """One seat of one match, used by one episode."""

    accepts_truncated_actions = True
    """A reply cut by the per-turn token budget is still submitted: the game judges it (an
    unparseable move is the game's business), where ending the episode would leave the match
    and forfeit it."""

    def __init__(self, stub: coordinator_grpc.CoordinatorServiceStub, *, address: str, match_id: str,
                 seat: str, agent_id: str, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 await_timeout_s: float = AWAIT_TURN_TIMEOUT_S, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.stub = stub
        self.metadata = metadata
        self.address = address
        self.match_id, self.seat, self.agent_id = match_id, seat, agent_id
        self.call_timeout_s = call_timeout_s
        self.await_timeout_s = await_timeout_s
        self.joined = False
        self.finished = False
        self.turn_index = 0
        """The turn the Coordinator granted this seat last (the one the next action plays)."""

    async def open(self) -> None:
        for name in ("match_id", "seat", "agent_id"):
            if not getattr(self, name):
                raise EnvironmentFailure(f"match episode: {name} is required")

    async def reset(self, kwargs: Mapping[str, Any], seed: int) -> ResetResult:
        """Join the seat and wait for its first turn (the match's reset kwargs and seed were
        given when it was opened, so `kwargs` and `seed` are unused)."""
        joined = await self._call("JoinMatch", coordinator_pb2.JoinMatchRequest(
            match_id=self.match_id, agent_id=self.agent_id, seat=self.seat), self.call_timeout_s)
        self.joined = True
        turn = await self._await_turn()
        return ResetResult(system_prompt=joined.system_prompt,
                           initial_user_message=joined.initial_user_message,
                           observation=turn.observation, done=self.finished, reward=turn.reward,
                           info=self._info(outcome=turn.outcome))

    async def step(self, action: str, *, truncated: bool = False) -> StepOutcome:
        """Submit the action; a cut one (`truncated`) goes as it is: the match's game judges
        every submitted action by its `step`."""
        request = coordinator_pb2.SubmitActionRequest(
            match_id=self.match_id, agent_id=self.agent_id, turn_index=self.turn_index, action=action,
            request_id=f"{self.match_id}:{self.agent_id}:{self.turn_index}")
        result = await self._call("SubmitAction", request, self.call_timeout_s)
        if result.match_finished:
            self.finished = True
            return StepOutcome(observation=result.observation, reward=result.reward, done=True,
                               info=self._info(accepted=result.accepted, outcome=result.outcome))
        turn = await self._await_turn()
        return StepOutcome(observation=turn.observation, reward=result.reward + turn.reward,
                           done=self.finished,
                           info=self._info(accepted=result.accepted, outcome=turn.outcome))

    async def close(self) -> None:
        """Leave a match this seat has not seen finish (a forfeit if it is still being played)."""
        if self.joined and not self.finished:
            self.finished = True
            with contextlib.suppress(Exception):
                await self.stub.LeaveMatch(coordinator_pb2.LeaveMatchRequest(
                    match_id=self.match_id, agent_id=self.agent_id), timeout=LEAVE_TIMEOUT_S)

    async def _await_turn(self) -> coordinator_pb2.AwaitTurnResponse:
        turn = await self._call("AwaitTurn", coordinator_pb2.AwaitTurnRequest(
            match_id=self.match_id, agent_id=self.agent_id), self.await_timeout_s)
        self.turn_index, self.finished = turn.turn_index, turn.match_finished
        return turn

    def _info(self, *, accepted: bool | None = None, outcome: str = "") -> dict[str, Any]:
        info: dict[str, Any] = {"seat": self.seat}
        if accepted is not None:
            info["accepted"] = accepted
        if self.finished:
            info.update(outcome=outcome, correct=outcome == "win")
        return info

    async def _call(self, method: str, request: Any, timeout_s: float) -> Any:
        try:
            return await getattr(self.stub, method)(request, timeout=timeout_s, metadata=self.metadata)
        except grpc.aio.AioRpcError as error:
            metadata = error.trailing_metadata()
            reason = reason_from_metadata(metadata).removeprefix("ERROR_REASON_")
            raise EnvironmentFailure(
                f"Coordinator {self.address} {method} (match {self.match_id}, seat {self.seat}) failed: "
                f"{error.code().name}{f' ({reason})' if reason else ''}: {error.details()}",
                traceback=traceback_from_metadata(metadata)) from error
