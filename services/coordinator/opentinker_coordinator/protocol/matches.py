"""One match: agents in seats take turns in a seated game, and see only what they may.

The match is the only place a seated game is stepped, so turn order is enforced here:
`submit` accepts an action only from the agent whose seat is to move and only for the turn
it was granted (`turn_index`); anything else is `NotYourTurn` and changes nothing. Steps run
one at a time under the match's lock.

Observations are delivered through per-seat inboxes: a step's observation (or, when the game
gives them, each seat's private view in `info["observations"]`) goes to every other seat's
inbox, and to the actor's own only when the actor moves again; a rejected action (the step's
info has "error") is news to the actor alone, unless it ended the match. The reset's
observation goes to every seat. `await_turn` hands a seat everything in its inbox, joined by a
blank line, once it is that seat's turn or the match has ended.

Rewards are delivered exactly once: the actor's share of a step in `submit`'s answer, other
seats' shares (`info["rewards"]`, e.g. -1 to the loser of a winning move) with their next
`await_turn`. A seat that leaves a match in progress forfeits (-1, the others share +1);
`abort` (an agent's worker was lost) ends it without a result.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from opentinker_coordinator.protocol.protocol_errors import (
    AgentLost,
    InvalidProtocolRequest,
    MatchEnvironmentFailed,
    MatchOver,
    NotYourTurn,
    ProtocolError,
    SeatTaken,
)
from opentinker_coordinator.protocol.seated_environment import (
    EnvironmentBroke,
    MatchEnvironmentRef,
    SeatedEnvironment,
    SeatedStart,
    SeatedStep,
)

FORFEIT = "forfeit"


class MatchState(StrEnum):
    WAITING_FOR_AGENTS = "WAITING_FOR_AGENTS"
    IN_PROGRESS = "IN_PROGRESS"
    FINISHED = "FINISHED"
    ABORTED = "ABORTED"


@dataclass(frozen=True, kw_only=True)
class MatchAction:
    turn_index: int
    seat: str
    agent_id: str
    action: str
    reward: float
    accepted: bool


@dataclass(frozen=True, kw_only=True)
class GrantedTurn:
    """What `await_turn` returns: a turn to play, or the end of the match."""

    turn_index: int
    observation: str
    finished: bool = False
    reward: float = 0.0
    """Rewards other seats' actions gave this seat since it last acted (final ones included)."""
    outcome: str = ""


@dataclass(frozen=True, kw_only=True)
class ActionResult:
    observation: str
    reward: float
    finished: bool
    accepted: bool
    outcome: str = ""


@dataclass(kw_only=True)
class Match:
    match_id: str
    job_id: str
    environment: SeatedEnvironment
    seats: tuple[str, ...]
    environment_ref: MatchEnvironmentRef | None = None
    system_prompt: str = ""
    initial_user_message: str = ""
    agents_by_seat: dict[str, str] = field(default_factory=dict)
    reserved_by_seat: dict[str, str] = field(default_factory=dict)
    """Seats kept for named agents (a driven job's pairing): nobody else may take them."""
    state: MatchState = MatchState.WAITING_FOR_AGENTS
    turn_index: int = 0
    current_seat: str = ""
    rewards_by_seat: dict[str, float] = field(default_factory=dict)
    """The final step's rewards per seat, once finished."""
    outcomes_by_seat: dict[str, str] = field(default_factory=dict)
    totals_by_seat: dict[str, float] = field(default_factory=dict)
    """Every reward each seat received, penalties included."""
    history: list[MatchAction] = field(default_factory=list)
    message: str = ""
    _inbox: dict[str, list[str]] = field(default_factory=dict)
    _pending_reward: dict[str, float] = field(default_factory=dict)
    _answers: dict[str, ActionResult] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _playing: asyncio.Future | None = None

    @classmethod
    def started(cls, *, match_id: str, job_id: str, environment: SeatedEnvironment, start: SeatedStart,
                agents_by_seat: Mapping[str, str] | None = None,
                environment_ref: MatchEnvironmentRef | None = None) -> "Match":
        """A match over a started game; `agents_by_seat` reserves seats for named agents."""
        match = cls(match_id=match_id, job_id=job_id, environment=environment, seats=start.seats,
                    environment_ref=environment_ref,
                    system_prompt=start.system_prompt, initial_user_message=start.initial_user_message,
                    current_seat=start.seats[0], reserved_by_seat=dict(agents_by_seat or {}))
        for seat in start.seats:
            match._inbox[seat] = [start.observation] if start.observation else []
            match._pending_reward[seat] = 0.0
            match.totals_by_seat[seat] = 0.0
        return match

    # -- seats --------------------------------------------------------------------------------

    def join(self, agent_id: str, seat: str) -> None:
        """Sit `agent_id` in `seat` (idempotent); the match starts once every seat is taken."""
        if seat not in self.seats:
            raise InvalidProtocolRequest(f"seat: expected one of {', '.join(self.seats)}, got {seat!r}")
        holder = self.agents_by_seat.get(seat) or self.reserved_by_seat.get(seat)
        if holder and holder != agent_id:
            raise SeatTaken(f"seat: {seat} of match {self.match_id} is taken by agent {holder!r}")
        elsewhere = next((s for s, a in self.agents_by_seat.items() if a == agent_id and s != seat), None)
        if elsewhere is not None:
            raise InvalidProtocolRequest(f"agent_id: {agent_id!r} already sits in seat {elsewhere} of match "
                                         f"{self.match_id}; one agent takes one seat")
        if self.state in (MatchState.FINISHED, MatchState.ABORTED) and seat not in self.agents_by_seat:
            raise MatchOver(f"match_id: match {self.match_id} is {self.state.lower()}")
        self.agents_by_seat[seat] = agent_id
        if self.state is MatchState.WAITING_FOR_AGENTS and len(self.agents_by_seat) == len(self.seats):
            self.state = MatchState.IN_PROGRESS
            self._touch()

    def seat_of(self, agent_id: str) -> str:
        seat = next((s for s, a in self.agents_by_seat.items() if a == agent_id), None)
        if seat is None:
            raise InvalidProtocolRequest(f"agent_id: {agent_id!r} has not joined match {self.match_id} "
                                         "(call JoinMatch first)")
        return seat

    # -- turns --------------------------------------------------------------------------------

    async def await_turn(self, agent_id: str) -> GrantedTurn:
        """Wait until it is this agent's turn or the match ended; raises AgentLost if aborted."""
        seat = self.seat_of(agent_id)
        while True:
            changed = self._changed
            if self.state is MatchState.ABORTED:
                raise AgentLost(f"match {self.match_id} was aborted: {self.message}")
            if self.state is MatchState.FINISHED:
                return GrantedTurn(turn_index=self.turn_index, observation=self._drain(seat), finished=True,
                                   reward=self._take_reward(seat), outcome=self.outcomes_by_seat.get(seat, ""))
            if self.state is MatchState.IN_PROGRESS and self.current_seat == seat:
                return GrantedTurn(turn_index=self.turn_index, observation=self._drain(seat),
                                   reward=self._take_reward(seat))
            await changed.wait()

    async def submit(self, agent_id: str, turn_index: int, action: str, request_id: str = "") -> ActionResult:
        """Apply the action of the seat to move for the turn it was granted."""
        seat = self.seat_of(agent_id)
        await self._lock.acquire()
        if request_id and request_id in self._answers:
            self._lock.release()
            return self._answers[request_id]
        try:
            self._check_turn(seat, turn_index)
        except ProtocolError:
            self._lock.release()
            raise
        # The step runs to its end (and releases the lock) even if this caller gives up, e.g. a
        # client deadline: the game may have taken the move, so the match must record it; a
        # retry with the request_id then gets the answer.
        self._playing = asyncio.ensure_future(self._play(seat, agent_id, action, request_id))
        self._playing.add_done_callback(_retrieve)
        return await asyncio.shield(self._playing)

    async def _play(self, seat: str, agent_id: str, action: str, request_id: str) -> ActionResult:
        """Step and record one action; the caller holds the lock, this releases it."""
        try:
            step = await self._step(action, seat)
            result = self._apply(seat, agent_id, action, step)
            if request_id:
                self._answers[request_id] = result
            self._touch()
            return result
        finally:
            self._lock.release()

    def _check_turn(self, seat: str, turn_index: int) -> None:
        if self.state in (MatchState.FINISHED, MatchState.ABORTED):
            raise MatchOver(f"match_id: match {self.match_id} is {self.state.lower()}; no more actions")
        if self.state is MatchState.WAITING_FOR_AGENTS:
            free = [s for s in self.seats if s not in self.agents_by_seat]
            raise NotYourTurn(f"match {self.match_id} waits for agents in seats {', '.join(free)}")
        if seat != self.current_seat:
            raise NotYourTurn(f"seat: {self.current_seat} is to move in match {self.match_id}, not {seat}")
        if turn_index != self.turn_index:
            raise NotYourTurn(f"turn_index: the turn to play is {self.turn_index}, not {turn_index} "
                              "(call AwaitTurn for the current one)")

    async def _step(self, action: str, seat: str) -> SeatedStep:
        try:
            return await self.environment.step(action, seat)
        except EnvironmentBroke as broke:
            await self._end_aborted(f"the environment failed: {broke}")
            raise MatchEnvironmentFailed(f"match {self.match_id}: the environment failed: {broke}",
                                         traceback=broke.traceback) from broke

    def _apply(self, seat: str, agent_id: str, action: str, step: SeatedStep) -> ActionResult:
        info = step.info
        accepted = "error" not in info
        rewards = _step_rewards(info, seat, step.reward, self.seats)
        for other, reward in rewards.items():
            self.totals_by_seat[other] += reward
            if other != seat:
                self._pending_reward[other] += reward
        self.history.append(MatchAction(turn_index=self.turn_index, seat=seat, agent_id=agent_id,
                                        action=action, reward=rewards[seat], accepted=accepted))
        self.turn_index += 1
        views = _views(info, step.observation, self.seats)
        next_seat = "" if step.done else self._next_seat(seat, accepted, info)
        for other in self._audience(seat, accepted or step.done, next_seat):
            if views.get(other):
                self._inbox[other].append(views[other])
        if step.done:
            self._finish(rewards, info)
        else:
            self.current_seat = next_seat
        return ActionResult(observation=views.get(seat, ""), reward=rewards[seat], finished=step.done,
                            accepted=accepted, outcome=self.outcomes_by_seat.get(seat, ""))

    def _audience(self, seat: str, accepted: bool, next_seat: str) -> list[str]:
        """Whose inbox a step's views go to: a rejected action changed nothing the others can
        see, so only the actor hears of it (unless it ended the match, e.g. a forfeiting illegal
        move: `accepted` is then True here); the actor's own view only when it moves again."""
        if not accepted:
            return [seat] if next_seat == seat else []
        return [other for other in self.seats if other != seat or next_seat == seat]

    def _next_seat(self, seat: str, accepted: bool, info: Mapping[str, Any]) -> str:
        named = info.get("to_move")
        if isinstance(named, str) and named in self.seats:
            return named
        if not accepted:
            return seat
        return self.seats[(self.seats.index(seat) + 1) % len(self.seats)]

    def _finish(self, rewards: Mapping[str, float], info: Mapping[str, Any]) -> None:
        self.state = MatchState.FINISHED
        self.current_seat = ""
        self.rewards_by_seat = dict(rewards)
        named = info.get("outcomes")
        self.outcomes_by_seat = {seat: _outcome(named, seat, rewards[seat]) for seat in self.seats}
        self._close_soon()

    # -- endings ------------------------------------------------------------------------------

    async def leave(self, agent_id: str) -> None:
        """The agent leaves; leaving a match in progress forfeits it (zero-sum: -1, others +1)."""
        seat = self.seat_of(agent_id)
        async with self._lock:
            if self.state in (MatchState.FINISHED, MatchState.ABORTED):
                return
            if self.state is MatchState.WAITING_FOR_AGENTS:
                await self._end_aborted(f"agent {agent_id!r} left before the match started")
                return
            others = [s for s in self.seats if s != seat]
            rewards = {s: 1.0 / len(others) for s in others} | {seat: -1.0}
            for other, reward in rewards.items():
                self.totals_by_seat[other] += reward
                if other != seat:
                    self._pending_reward[other] += reward
            self.message = f"agent {agent_id!r} ({seat}) left and forfeits"
            self._finish(rewards, {"outcomes": {s: "win" for s in others} | {seat: FORFEIT}})
            self._touch()

    async def abort(self, message: str) -> None:
        """End without a result (an agent's worker was lost); waiting agents get AgentLost."""
        async with self._lock:
            if self.state not in (MatchState.FINISHED, MatchState.ABORTED):
                await self._end_aborted(message)

    async def _end_aborted(self, message: str) -> None:
        self.state, self.message, self.current_seat = MatchState.ABORTED, message, ""
        self._touch()
        self._close_soon()

    def _close_soon(self) -> None:
        asyncio.get_running_loop().create_task(_close_quietly(self.environment))

    @property
    def ended(self) -> bool:
        return self.state in (MatchState.FINISHED, MatchState.ABORTED)

    async def wait_ended(self) -> None:
        while not self.ended:
            await self._changed.wait()

    # -- internals ----------------------------------------------------------------------------

    def _drain(self, seat: str) -> str:
        text = "\n\n".join(self._inbox[seat])
        self._inbox[seat] = []
        return text

    def _take_reward(self, seat: str) -> float:
        reward, self._pending_reward[seat] = self._pending_reward[seat], 0.0
        return reward

    def _touch(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


def _step_rewards(info: Mapping[str, Any], seat: str, reward: float, seats: Sequence[str]) -> dict[str, float]:
    """Each seat's reward for one step: info["rewards"] when the game gives it, else the
    step's reward to the actor (whose share is always the step's own reward)."""
    named = info.get("rewards")
    rewards = {s: 0.0 for s in seats}
    if isinstance(named, Mapping):
        for other, value in named.items():
            if other in rewards and isinstance(value, (int, float)) and not isinstance(value, bool):
                rewards[other] = float(value)
    rewards[seat] = float(reward)
    return rewards


def _views(info: Mapping[str, Any], observation: str, seats: Sequence[str]) -> dict[str, str]:
    named = info.get("observations")
    if isinstance(named, Mapping):
        return {seat: str(named.get(seat, "")) for seat in seats}
    return {seat: observation for seat in seats}


def _outcome(named: Any, seat: str, reward: float) -> str:
    if isinstance(named, Mapping) and isinstance(named.get(seat), str) and named[seat]:
        return named[seat]
    return "win" if reward > 0 else "loss" if reward < 0 else "draw"


def _retrieve(future: asyncio.Future) -> None:
    """Marks a step's failure as seen (its caller may have given up on it)."""
    if not future.cancelled():
        future.exception()


async def _close_quietly(environment: SeatedEnvironment) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(10):
            await environment.close()
