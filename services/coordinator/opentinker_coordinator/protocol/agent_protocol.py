"""The Agent Protocol Coordinator: every match and barrier this Coordinator hosts.

The servicer (agents calling over gRPC, e.g. the Rollout playing a seat) and the multi-agent
driver (in-process) use the same object, so a driven job's barriers and the matches its
agents play are one state.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from opentinker_coordinator.protocol.barriers import Arrival, JobBarriers
from opentinker_coordinator.protocol.matches import ActionResult, GrantedTurn, Match
from opentinker_coordinator.protocol.protocol_errors import (
    InvalidProtocolRequest,
    MatchEnvironmentFailed,
    MatchNotFound,
    open_refusal,
)
from opentinker_coordinator.protocol.seated_environment import (
    EnvironmentBroke,
    MatchEnvironmentRef,
    SeatedEnvironmentFactory,
)

log = structlog.get_logger(__name__)

MAX_ENDED_MATCHES = 4096
"""Ended matches kept for GetMatch before the oldest are forgotten."""


class AgentProtocol:
    def __init__(self, environments: SeatedEnvironmentFactory) -> None:
        self.environments = environments
        self.matches: OrderedDict[str, Match] = OrderedDict()
        self.by_request: dict[tuple[str, str], asyncio.Future[Match]] = {}
        """Opens by (job_id, request_id), while they run and once they succeeded."""
        self.jobs: dict[str, JobBarriers] = {}

    # -- jobs and barriers ----------------------------------------------------------------------

    def register_job(self, job_id: str, agent_ids: Sequence[str]) -> JobBarriers:
        """A driven job: its barriers expect exactly these agents (a new attempt starts afresh)."""
        barriers = JobBarriers(job_id=job_id, members=set(agent_ids), fixed=True)
        self.jobs[job_id] = barriers
        return barriers

    def barriers(self, job_id: str) -> JobBarriers:
        if not job_id:
            raise InvalidProtocolRequest("job_id: is required")
        return self.jobs.setdefault(job_id, JobBarriers(job_id=job_id))

    async def arrive(self, job_id: str, agent_id: str, phase: str, step: int,
                     timeout_s: float | None = None) -> Arrival:
        return await self.barriers(job_id).arrive(agent_id, phase, step, timeout_s=timeout_s)

    async def agent_lost(self, job_id: str, agent_id: str, reason: str) -> None:
        """Break the job's barriers and abort its unfinished matches where the agent plays."""
        log.warning("agent_lost", job_id=job_id, agent_id=agent_id, reason=reason)
        self.barriers(job_id).lose(agent_id, reason)
        for match in list(self.matches.values()):
            seated = agent_id in match.agents_by_seat.values() or agent_id in match.reserved_by_seat.values()
            if match.job_id == job_id and seated and not match.ended:
                await match.abort(f"agent {agent_id!r} was lost: {reason}")

    def forget_job(self, job_id: str) -> None:
        self.jobs.pop(job_id, None)
        for match_id in [m.match_id for m in self.matches.values() if m.job_id == job_id]:
            self.matches.pop(match_id, None)
        self.by_request = {key: value for key, value in self.by_request.items() if key[0] != job_id}

    # -- matches --------------------------------------------------------------------------------

    async def open_match(self, *, job_id: str, environment: MatchEnvironmentRef, seats: Sequence[str] = (),
                         reset_kwargs: Mapping[str, Any] | None = None, seed: int = 0, request_id: str = "",
                         agents_by_seat: Mapping[str, str] | None = None) -> Match:
        """Open and reset a match of `environment`; a repeated `request_id` returns the same match."""
        if not job_id:
            raise InvalidProtocolRequest("job_id: is required")
        if not environment.env_name:
            raise InvalidProtocolRequest("environment.env_name: is required")
        key = (job_id, request_id)
        if request_id and key in self.by_request:
            return await asyncio.shield(self.by_request[key])
        # The start runs to its end even if this caller gives up: concurrent opens with the same
        # request_id wait for it, and a retry gets the match instead of a leaked session.
        opening = asyncio.ensure_future(
            self._start(job_id, environment, seats, reset_kwargs or {}, seed, agents_by_seat))
        if request_id:
            self.by_request[key] = opening
            opening.add_done_callback(lambda done: self._opened(key, done))
        else:
            opening.add_done_callback(_retrieve)
        return await asyncio.shield(opening)

    def _opened(self, key: tuple[str, str], opening: asyncio.Future[Match]) -> None:
        """A failed open is forgotten (a retry starts afresh); its error counts as retrieved."""
        if (opening.cancelled() or opening.exception() is not None) and self.by_request.get(key) is opening:
            del self.by_request[key]

    async def _start(self, job_id: str, environment: MatchEnvironmentRef, seats: Sequence[str],
                     reset_kwargs: Mapping[str, Any], seed: int,
                     agents_by_seat: Mapping[str, str] | None) -> Match:
        game = self.environments(environment, job_id)
        try:
            start = await game.start(reset_kwargs, seed)
        except EnvironmentBroke as broke:
            await game.close()
            raise MatchEnvironmentFailed(f"environment: {environment.env_name} could not start a match: {broke}",
                                         traceback=broke.traceback, unreachable=broke.unreachable,
                                         host_code=broke.host_code, host_details=broke.host_details) from broke
        problem = _seat_problem(environment.env_name, start.seats, seats, agents_by_seat or {})
        if problem:
            await game.close()
            raise InvalidProtocolRequest(problem)
        match = Match.started(match_id=uuid.uuid4().hex, job_id=job_id, environment=game, start=start,
                              agents_by_seat=agents_by_seat, environment_ref=environment)
        self.matches[match.match_id] = match
        self.barriers(job_id)
        self._evict_ended()
        return match

    async def seats_of(self, environment: MatchEnvironmentRef, job_id: str) -> tuple[str, ...]:
        """The game's seats in turn order (a session is opened and closed to ask)."""
        game = self.environments(environment, job_id)
        try:
            start = await game.start({}, 0)
        except EnvironmentBroke as broke:
            raise MatchEnvironmentFailed(f"environment: {environment.env_name} could not start: {broke}",
                                         traceback=broke.traceback) from broke
        finally:
            await game.close()
        problem = _seat_problem(environment.env_name, start.seats, (), {})
        if problem:
            raise InvalidProtocolRequest(problem)
        return start.seats

    async def open_match_for_agent(self, *, job_id: str, environment: MatchEnvironmentRef, seats: Sequence[str],
                                   reset_kwargs: Mapping[str, Any], seed: int, request_id: str) -> Match:
        """`open_match` as an agent asked for it (OpenMatch): an environment that refused the
        request answers as the request's error (`open_refusal`), not as a broken environment."""
        try:
            return await self.open_match(job_id=job_id, environment=environment, seats=seats,
                                         reset_kwargs=reset_kwargs, seed=seed, request_id=request_id)
        except MatchEnvironmentFailed as error:
            refusal = open_refusal(error, environment.envhost_address)
            if refusal is None:
                raise
            raise refusal from error

    def job_of_match(self, match_id: str) -> str:
        """The job a match belongs to ("" for an unknown match)."""
        match = self.matches.get(match_id)
        return match.job_id if match is not None else ""

    def get(self, match_id: str) -> Match:
        if not match_id:
            raise InvalidProtocolRequest("match_id: is required")
        match = self.matches.get(match_id)
        if match is None:
            raise MatchNotFound(f"match_id: no match {match_id!r} on this Coordinator")
        return match

    def join(self, match_id: str, agent_id: str, seat: str) -> Match:
        if not agent_id:
            raise InvalidProtocolRequest("agent_id: is required")
        match = self.get(match_id)
        match.join(agent_id, seat)
        self.barriers(match.job_id).add_member(agent_id)
        return match

    async def await_turn(self, match_id: str, agent_id: str) -> GrantedTurn:
        return await self.get(match_id).await_turn(agent_id)

    async def submit(self, match_id: str, agent_id: str, turn_index: int, action: str,
                     request_id: str = "") -> ActionResult:
        return await self.get(match_id).submit(agent_id, turn_index, action, request_id)

    async def leave(self, match_id: str, agent_id: str) -> Match:
        match = self.get(match_id)
        await match.leave(agent_id)
        return match

    def forget(self, match_ids: Sequence[str]) -> None:
        for match_id in match_ids:
            self.matches.pop(match_id, None)
        self._forget_requests(set(match_ids))

    def _evict_ended(self) -> None:
        ended = [m.match_id for m in self.matches.values() if m.ended]
        evicted = ended[:max(0, len(ended) - MAX_ENDED_MATCHES)]
        for match_id in evicted:
            self.matches.pop(match_id, None)
        self._forget_requests(set(evicted))

    def _forget_requests(self, match_ids: set[str]) -> None:
        """Request ids of forgotten matches: a retried open must not hand out a match that
        GetMatch/JoinMatch no longer know (nor keep it alive)."""
        if match_ids:
            self.by_request = {key: opening for key, opening in self.by_request.items()
                               if not (opening.done() and not opening.cancelled() and opening.exception() is None
                                       and opening.result().match_id in match_ids)}

    async def close(self) -> None:
        for match in list(self.matches.values()):
            await match.abort("the Coordinator is shutting down")


def _retrieve(opening: asyncio.Future) -> None:
    """Marks a failed open's error as seen (its caller may have given up on it)."""
    if not opening.cancelled():
        opening.exception()


def _seat_problem(env_name: str, game_seats: Sequence[str], asked: Sequence[str],
                  agents_by_seat: Mapping[str, str]) -> str:
    if len(game_seats) < 2:
        return f"environment: {env_name} is not a multi-agent game (it has no seats); matches need one"
    if asked and tuple(asked) != tuple(game_seats):
        return f"seats: {env_name} has seats {', '.join(game_seats)} (in turn order), not {', '.join(asked)}"
    unknown = [seat for seat in agents_by_seat if seat not in game_seats]
    if unknown:
        return f"seats: {env_name} has no seat {unknown[0]!r}"
    return ""
