"""Matches of the Agent Protocol: turn order, observations, rewards and endings.

The property tests play random games (gomoku 3..5 and the 3-seat `CounterRace`) with one
concurrent agent task per seat: random pauses (and random delays inside the environment's
step), random legal, illegal and garbage moves, out-of-turn and stale-turn attempts, retries
with a request_id, and sometimes a seat that leaves mid-game. Each finished match is then
checked against an oracle that replays its history on a fresh game (the game itself refuses a
seat out of turn) and applies the documented delivery rules.
"""

from __future__ import annotations

import asyncio
import math
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opentinker_runtime.games.gomoku import Move, move_name
from opentinker_runtime.games.gomoku_game import STONE_SEATS
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.protocol.matches import FORFEIT, ActionResult, Match, MatchState
from opentinker_coordinator.protocol.protocol_errors import (
    AgentLost,
    InvalidProtocolRequest,
    MatchEnvironmentFailed,
    MatchOver,
    NotYourTurn,
    SeatTaken,
)
from opentinker_coordinator.protocol.seated_environment import MatchEnvironmentRef
from tests.coordinator.toy_games import GAMES, SEAT_NAMES, CounterRace, catalog_factory, secret_tag

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GAME_TIMEOUT_S = 20.0


# -- the oracle ------------------------------------------------------------------------------


def seat_to_move(game: Any) -> str:
    """Whose move the game's own state says it is (not the info contract)."""
    if isinstance(game, CounterRace):
        return game.to_move
    return STONE_SEATS[game.to_move]


@dataclass
class Expected:
    seats: tuple[str, ...]
    streams: dict[str, list[str]]
    """What each seat's inbox must have received, in order."""
    answers: list[tuple[str, float, bool, bool]] = field(default_factory=list)
    """Per turn: (the actor's view, its reward, done, accepted)."""
    totals: dict[str, float] = field(default_factory=dict)
    done: bool = False
    final_rewards: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    rejected_views: list[tuple[str, str]] = field(default_factory=list)


def replay(env_name: str, config: dict[str, Any], reset_kwargs: dict[str, Any], history: Sequence[Any]) -> Expected:
    """Replays `history` on a fresh game: every action must come from the seat the game says is
    to move (the game raises otherwise) and the delivery rules of matches.py give the rest."""
    game = GAMES[env_name](**config)
    opening = game.reset(**reset_kwargs)
    seats = tuple(game.seats)
    expected = Expected(seats=seats, streams={s: [opening] if opening else [] for s in seats},
                        totals={s: 0.0 for s in seats})
    for position, action in enumerate(history):
        assert not expected.done, f"history goes on after the game ended at turn {position - 1}"
        assert action.turn_index == position
        assert action.seat == seat_to_move(game), f"turn {position}: {action.seat} acted, the game says {seat_to_move(game)}"
        result = game.step(action.action, seat=action.seat)
        accepted = "error" not in result.info
        rewards = {s: 0.0 for s in seats} | dict(result.info.get("rewards", {})) | {action.seat: result.reward}
        for s, r in rewards.items():
            expected.totals[s] += r
        views = result.info.get("observations") or {s: result.observation for s in seats}
        views = {s: views.get(s, "") for s in seats}
        next_seat = "" if result.done else seat_to_move(game)
        if accepted or result.done:  # the end of the match is news to every seat
            audience = [s for s in seats if s != action.seat or next_seat == action.seat]
        else:
            audience = [action.seat] if next_seat == action.seat else []
            expected.rejected_views.append((action.seat, views[action.seat]))
        for s in audience:
            if views[s]:
                expected.streams[s].append(views[s])
        expected.answers.append((views[action.seat], result.reward, result.done, accepted))
        if result.done:
            expected.done, expected.final_rewards = True, rewards
            expected.outcomes = dict(result.info["outcomes"])
    return expected


# -- the agents ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    env_name: str
    config: dict[str, Any]
    reset_kwargs: dict[str, Any]
    seed: int
    p_illegal: float
    p_meddle: float
    pauses: tuple[float, ...]
    step_delays: tuple[float, ...]
    leave: tuple[int, int] | None
    """(agent index, loop iteration) where that agent leaves, if the match is in progress."""


@dataclass
class Seen:
    agent_id: str
    seat: str
    observations: list[str] = field(default_factory=list)
    """Non-empty AwaitTurn observations, in order."""
    answers: dict[int, ActionResult] = field(default_factory=dict)
    received: float = 0.0
    forfeited_by_leaving: bool = False
    meddled: int = 0
    final_outcome: str = ""


def lock_free(match: Match) -> bool:
    """True when a submit would take the match's lock without yielding (so the attempt is atomic)."""
    lock = match._lock
    return not lock.locked() and not getattr(lock, "_waiters", None)


def snapshot(match: Match, env: Any) -> tuple:
    return (match.state, match.turn_index, match.current_seat, len(match.history), len(env.steps),
            {s: list(v) for s, v in match._inbox.items()}, dict(match._pending_reward), dict(match.totals_by_seat),
            dict(match.rewards_by_seat), match.message)


class Table:
    """One match and the agents playing it."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.rng = random.Random(scenario.seed)
        delays = random.Random(scenario.seed + 1)
        self.opened: list[Any] = []
        self.protocol = AgentProtocol(catalog_factory(lambda: delays.choice(scenario.step_delays), self.opened))
        self.tags: list[str] = []
        self.match: Match

    async def play(self) -> list[Seen]:
        s = self.scenario
        self.match = await self.protocol.open_match(
            job_id="job", environment=MatchEnvironmentRef(env_name=s.env_name, config=s.config),
            reset_kwargs=s.reset_kwargs, request_id="open")
        seats = list(self.match.seats)
        self.rng.shuffle(seats)
        seen = [Seen(agent_id=f"agent-{i}", seat=seat) for i, seat in enumerate(seats)]
        async with asyncio.timeout(GAME_TIMEOUT_S):
            await asyncio.gather(*(self.agent(i, one, random.Random(s.seed * 31 + i)) for i, one in enumerate(seen)))
        await asyncio.sleep(0)  # the environment closes in a task of its own
        return seen

    @property
    def env(self) -> Any:
        return self.opened[0]

    async def pause(self, rng: random.Random) -> None:
        await asyncio.sleep(rng.choice(self.scenario.pauses))

    async def agent(self, index: int, seen: Seen, rng: random.Random) -> None:
        match, protocol, agent_id, seat = self.match, self.protocol, seen.agent_id, seen.seat
        await self.pause(rng)
        protocol.join(match.match_id, agent_id, seat)
        iteration = 0
        while True:
            if self.scenario.leave == (index, iteration) and match.state is MatchState.IN_PROGRESS:
                await protocol.leave(match.match_id, agent_id)
                seen.forfeited_by_leaving = match.message == f"agent {agent_id!r} ({seat}) left and forfeits"
            iteration += 1
            if rng.random() < self.scenario.p_meddle:
                await self.meddle(seen, rng)
            await self.pause(rng)
            turn = await protocol.await_turn(match.match_id, agent_id)
            seen.received += turn.reward
            if turn.observation:
                seen.observations.append(turn.observation)
            if turn.finished:
                seen.final_outcome = turn.outcome
                break
            # granted: this seat is to move and nobody else can change the match until it acts
            assert (match.state, match.current_seat, match.turn_index) == (MatchState.IN_PROGRESS, seat, turn.turn_index)
            if rng.random() < self.scenario.p_meddle:
                await self.meddle(seen, rng)
            await self.pause(rng)
            request_id = uuid.uuid4().hex if rng.random() < 0.3 else ""
            action = self.choose(seat, rng)
            try:
                result = await protocol.submit(match.match_id, agent_id, turn.turn_index, action, request_id)
            except MatchOver:  # only a seat that left can end the match while this one is to move
                assert match.message.endswith("left and forfeits"), match.message
                continue
            seen.answers[turn.turn_index] = result
            seen.received += result.reward
            if request_id and rng.random() < 0.7:
                await self.pause(rng)
                again = await protocol.submit(match.match_id, agent_id, turn.turn_index, action, request_id)
                assert again == result, "a retry with the same request_id must get the same answer"
            elif rng.random() < self.scenario.p_meddle:
                await self.replay_turn(seen, turn.turn_index)
            if result.finished:
                seen.final_outcome = result.outcome
                break
        final = await protocol.await_turn(match.match_id, agent_id)
        assert final.finished and final.outcome == seen.final_outcome
        seen.received += final.reward
        if final.observation:
            seen.observations.append(final.observation)

    async def meddle(self, seen: Seen, rng: random.Random) -> None:
        """Act out of turn or for a turn that is not the one to play: always NotYourTurn (or
        MatchOver once the match ended), and nothing changes."""
        match = self.match
        if match.ended:
            return
        t, current, state = match.turn_index, match.current_seat, match.state
        atomic = lock_free(match)
        if current == seen.seat and state is MatchState.IN_PROGRESS:
            if not atomic:
                return  # a step in flight could hand this seat exactly that turn
            turn_index = t + rng.choice([-2, -1, 1, 2, 5])
            turn_index = turn_index if turn_index >= 0 else t + 1
        elif current == seen.seat:  # the first seat, waiting for the others to join
            if not atomic:
                return
            turn_index = t
        else:  # turn t and every earlier one belong to other seats or are played
            turn_index = t - rng.randint(0, min(t, 3))
        tag = f"meddle-{uuid.uuid4().hex}"
        self.tags.append(tag)
        before = snapshot(match, self.env) if atomic else None
        with pytest.raises((NotYourTurn, MatchOver)) as refused:
            await self.protocol.submit(match.match_id, seen.agent_id, turn_index, tag)
        if isinstance(refused.value, MatchOver):
            assert not atomic and match.ended, f"MatchOver while the match was {state}: {refused.value}"
        if before is not None:
            assert snapshot(match, self.env) == before, "a refused action changed the match"
        seen.meddled += 1

    async def replay_turn(self, seen: Seen, turn_index: int) -> None:
        """Submitting a turn already played again (no request_id) is refused."""
        tag = f"meddle-{uuid.uuid4().hex}"
        self.tags.append(tag)
        with pytest.raises((NotYourTurn, MatchOver)) as refused:
            await self.protocol.submit(self.match.match_id, seen.agent_id, turn_index, tag)
        assert isinstance(refused.value, NotYourTurn) or self.match.ended
        seen.meddled += 1

    def choose(self, seat: str, rng: random.Random) -> str:
        illegal = rng.random() < self.scenario.p_illegal
        game = self.env.game
        if isinstance(game, CounterRace):
            if illegal:
                return rng.choice(["0", str(game.max_add + 1), "many", "", "-1"])
            return rng.choice([str(rng.randint(1, game.max_add)), f" {rng.randint(1, game.max_add)}\n"])
        empty = list(game.board.empty_cells())
        if illegal or not empty:
            taken = [Move(r, c) for r in range(game.size) for c in range(game.size) if Move(r, c) not in empty]
            options = ["pass", "", f"{chr(ord('a') + game.size)}1", f"a{game.size + 1}"]
            if taken:
                options.append(move_name(rng.choice(taken)))
            return rng.choice(options)
        move = rng.choice(empty)
        return rng.choice([move_name(move), f"{move.row + 1},{move.col + 1}", f"I play {move_name(move).upper()}"])


# -- the checks ----------------------------------------------------------------------------


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def check_match(table: Table, seen: list[Seen]) -> None:
    s, match = table.scenario, table.match
    assert match.state is MatchState.FINISHED, match.message
    assert table.env.closed, "a finished match closes its environment"
    history = match.history
    # nothing refused reached the game or the history; every accepted call reached it once
    assert table.env.steps == [(a.seat, a.action) for a in history]
    assert not {a.action for a in history} & set(table.tags)
    assert match.agents_by_seat == {one.seat: one.agent_id for one in seen}
    for action in history:
        assert match.agents_by_seat[action.seat] == action.agent_id

    expected = replay(s.env_name, s.config, s.reset_kwargs, history)
    leavers = [one for one in seen if one.forfeited_by_leaving]
    assert len(leavers) <= 1
    if leavers:
        leaver = leavers[0].seat
        assert not expected.done, "a seat can only forfeit by leaving a match in progress"
        others = [x for x in expected.seats if x != leaver]
        final = {leaver: -1.0} | {x: 1.0 / len(others) for x in others}
        assert match.outcomes_by_seat == {leaver: FORFEIT} | {x: "win" for x in others}
        for x, r in final.items():
            expected.totals[x] += r
    else:
        assert expected.done, "the match finished although the game did not"
        final = expected.final_rewards
        assert match.outcomes_by_seat == expected.outcomes
    assert match.rewards_by_seat.keys() == final.keys()
    assert all(close(match.rewards_by_seat[x], final[x]) for x in final)
    assert close(sum(match.rewards_by_seat.values()), 0.0), "zero-sum games: final rewards sum to 0"
    assert all(close(match.totals_by_seat[x], expected.totals[x]) for x in expected.seats), (
        match.totals_by_seat, expected.totals)

    for one in seen:
        # rewards: everything this seat got, delivered exactly once
        received = one.received + (-1.0 if one.forfeited_by_leaving else 0.0)
        assert close(received, match.totals_by_seat[one.seat]), (one.seat, received, match.totals_by_seat)
        assert one.final_outcome == match.outcomes_by_seat[one.seat]
        # the actor's answers are the game's, for the turns this agent was granted
        for turn_index, answer in one.answers.items():
            assert history[turn_index].agent_id == one.agent_id
            view, reward, done, accepted = expected.answers[turn_index]
            assert (answer.observation, answer.reward, answer.finished, answer.accepted) == (view, reward, done, accepted)
        assert sorted(one.answers) == [a.turn_index for a in history if a.agent_id == one.agent_id]
        # observations: exactly this seat's inbox, in order
        assert "\n\n".join(one.observations) == "\n\n".join(expected.streams[one.seat])
        everything = one.observations + [a.observation for a in one.answers.values()]
        for other in expected.seats:
            if other != one.seat and s.env_name == "counter":
                assert not any(secret_tag(other) in text for text in everything), f"{one.seat} saw {other}'s secret"
        for actor, view in expected.rejected_views:
            if actor != one.seat and view:
                assert not any(view in text for text in one.observations), f"{one.seat} heard of {actor}'s rejected move"
    assert sum(one.meddled for one in seen) == len(table.tags)


def play(scenario: Scenario) -> tuple[Table, list[Seen]]:
    table = Table(scenario)

    async def main() -> list[Seen]:
        return await table.play()

    seen = asyncio.run(main())
    check_match(table, seen)
    return table, seen


# -- properties ----------------------------------------------------------------------------

pauses = st.sampled_from([(0.0,), (0.0, 0.0, 0.001), (0.0, 0.0005, 0.002)])


@st.composite
def gomoku_scenarios(draw: st.DrawFn) -> Scenario:
    size = draw(st.integers(3, 5))
    config = {"size": size, "win_length": draw(st.integers(3, size)),
              "invalid_move_penalty": draw(st.sampled_from([0.0, -0.25, -0.5, -1.0])),
              "max_invalid_moves": draw(st.integers(0, 3))}
    return draw(scenarios("gomoku", config, {}, seats=2))


@st.composite
def counter_scenarios(draw: st.DrawFn) -> Scenario:
    players = draw(st.sampled_from([3, 3, 3, 2, 4]))
    config = {"players": players, "target": draw(st.integers(1, 14)), "max_add": draw(st.integers(2, 3)),
              "invalid_move_penalty": draw(st.sampled_from([0.0, -0.1, -0.5])),
              "max_invalid_moves": draw(st.integers(0, 3))}
    return draw(scenarios("counter", config, {"seed": draw(st.integers(0, 999))}, seats=players))


def scenarios(env_name: str, config: dict[str, Any], reset_kwargs: dict[str, Any], *, seats: int) -> st.SearchStrategy:
    return st.builds(
        Scenario, env_name=st.just(env_name), config=st.just(config), reset_kwargs=st.just(reset_kwargs),
        seed=st.integers(0, 2**31), p_illegal=st.sampled_from([0.0, 0.15, 0.4]),
        p_meddle=st.sampled_from([0.0, 0.3, 0.8]), pauses=pauses,
        step_delays=st.sampled_from([(0.0,), (0.0, 0.001), (0.0005, 0.002)]),
        leave=st.one_of(st.none(), st.none(), st.tuples(st.integers(0, seats - 1), st.integers(0, 6))))


@SETTINGS
@given(gomoku_scenarios())
def test_random_gomoku_matches_keep_turn_order_rewards_and_observations(scenario: Scenario) -> None:
    play(scenario)


@SETTINGS
@given(counter_scenarios())
def test_random_counter_race_matches_with_three_seats_keep_private_views(scenario: Scenario) -> None:
    play(scenario)


def test_the_property_games_really_meddle_reject_and_forfeit() -> None:
    """The agents of the property tests do what they claim (so the checks are not vacuous)."""
    kinds: set[str] = set()
    meddled = 0
    for seed in range(12):
        for env_name, config, kwargs in [("gomoku", {"size": 4, "win_length": 3, "max_invalid_moves": 2}, {}),
                                         ("counter", {"players": 3, "target": 9}, {"seed": seed})]:
            table, seen = play(Scenario(env_name=env_name, config=config, reset_kwargs=kwargs, seed=seed,
                                        p_illegal=0.3, p_meddle=0.8, pauses=(0.0, 0.001), step_delays=(0.0, 0.001),
                                        leave=(0, 3) if seed % 4 == 0 else None))
            meddled += sum(one.meddled for one in seen)
            kinds |= {"rejected" for a in table.match.history if not a.accepted}
            kinds |= {"left" for one in seen if one.forfeited_by_leaving}
            kinds |= {f"{len(table.match.seats)} seats"}
            kinds |= {"skip" for a, b in zip(table.match.history, table.match.history[1:])
                      if env_name == "counter" and a.accepted and b.seat not in (a.seat, next_seat(table.match, a.seat))}
    assert meddled > 50
    assert {"rejected", "left", "2 seats", "3 seats", "skip"} <= kinds


def next_seat(match: Match, seat: str) -> str:
    return match.seats[(match.seats.index(seat) + 1) % len(match.seats)]


# -- examples --------------------------------------------------------------------------------


def gomoku_ref(**config: Any) -> MatchEnvironmentRef:
    return MatchEnvironmentRef(env_name="gomoku", config={"size": 3, "win_length": 3} | config)


def counter_ref(**config: Any) -> MatchEnvironmentRef:
    return MatchEnvironmentRef(env_name="counter", config=config)


async def seated(protocol: AgentProtocol, environment: MatchEnvironmentRef, **kwargs: Any) -> Match:
    match = await protocol.open_match(job_id=kwargs.pop("job_id", "job"), environment=environment, **kwargs)
    for i, seat in enumerate(match.seats):
        protocol.join(match.match_id, f"agent-{i}", seat)
    return match


def test_three_seats_follow_the_games_turn_order_and_views_stay_private() -> None:
    async def main() -> None:
        opened: list = []
        protocol = AgentProtocol(catalog_factory(opened=opened))
        match = await seated(protocol, counter_ref(target=7), reset_kwargs={"seed": 3})
        north, east, south = "agent-0", "agent-1", "agent-2"
        assert match.seats == ("north", "east", "south") and match.state is MatchState.IN_PROGRESS
        first = await protocol.await_turn(match.match_id, north)
        assert first.observation == "Race to 7. counter=0. north to move"
        with pytest.raises(NotYourTurn, match="north is to move"):
            await protocol.submit(match.match_id, east, 0, "1")
        answer = await protocol.submit(match.match_id, north, 0, "3")  # 3 skips east
        assert answer.accepted and answer.observation.startswith("[north] north added 3")
        assert match.current_seat == "south"
        with pytest.raises(NotYourTurn):
            await protocol.submit(match.match_id, east, 1, "1")
        turn = await protocol.await_turn(match.match_id, south)
        assert turn.turn_index == 1 and secret_tag("south") in turn.observation
        assert secret_tag("north") not in turn.observation and secret_tag("east") not in turn.observation
        rejected = await protocol.submit(match.match_id, south, 1, "7")
        assert not rejected.accepted and rejected.reward == pytest.approx(-0.1)
        again = await protocol.await_turn(match.match_id, south)  # the same seat moves again
        assert again.turn_index == 2 and "rejected '7'" in again.observation
        await protocol.submit(match.match_id, south, 2, "2")  # counter 5, north next
        await protocol.await_turn(match.match_id, north)
        final = await protocol.submit(match.match_id, north, 3, "2")  # 7: north wins
        assert final.finished and final.outcome == "win" and final.reward == 1.0
        east_end = await protocol.await_turn(match.match_id, east)
        assert east_end.finished and east_end.outcome == "loss" and east_end.reward == pytest.approx(-0.5)
        assert "rejected" not in east_end.observation and "[east] north added 3" in east_end.observation
        south_end = await protocol.await_turn(match.match_id, south)
        assert south_end.reward == pytest.approx(-0.5)
        assert [a.seat for a in match.history] == ["north", "south", "south", "north"]
        assert match.rewards_by_seat == {"north": 1.0, "east": -0.5, "south": -0.5}
        assert match.totals_by_seat == pytest.approx({"north": 1.0, "east": -0.5, "south": -0.6})
        await asyncio.sleep(0)
        assert opened[0].closed

    asyncio.run(main())


def test_a_refused_action_changes_nothing() -> None:
    async def main() -> None:
        opened: list = []
        protocol = AgentProtocol(catalog_factory(opened=opened))
        match = await protocol.open_match(job_id="job", environment=gomoku_ref())
        protocol.join(match.match_id, "A", "black")
        with pytest.raises(NotYourTurn, match="waits for agents in seats white"):
            await protocol.submit(match.match_id, "A", 0, "a1")
        protocol.join(match.match_id, "B", "white")
        before = snapshot(match, opened[0])
        with pytest.raises(NotYourTurn, match="black is to move"):
            await protocol.submit(match.match_id, "B", 0, "a1")
        for stale in (-1, 1, 7):
            with pytest.raises(NotYourTurn, match="turn_index"):
                await protocol.submit(match.match_id, "A", stale, "a1")
        assert snapshot(match, opened[0]) == before and not opened[0].steps
        await protocol.submit(match.match_id, "A", 0, "a1")
        with pytest.raises(NotYourTurn, match="turn_index: the turn to play is 1"):
            await protocol.submit(match.match_id, "B", 0, "b1")  # a stale turn, though white is to move
        with pytest.raises(NotYourTurn):
            await protocol.submit(match.match_id, "A", 0, "b1")  # the turn it already played
        assert len(match.history) == 1 and opened[0].steps == [("black", "a1")]
        with pytest.raises(InvalidProtocolRequest, match="has not joined"):
            await protocol.submit(match.match_id, "C", 1, "b1")
        with pytest.raises(InvalidProtocolRequest, match="has not joined"):
            await protocol.await_turn(match.match_id, "C")

    asyncio.run(main())


def test_seats_are_taken_once_and_reserved_seats_wait_for_their_agent() -> None:
    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        match = await protocol.open_match(job_id="job", environment=gomoku_ref(), agents_by_seat={"white": "W"})
        protocol.join(match.match_id, "A", "black")
        protocol.join(match.match_id, "A", "black")  # idempotent
        with pytest.raises(SeatTaken, match="taken by agent 'A'"):
            protocol.join(match.match_id, "B", "black")
        with pytest.raises(SeatTaken, match="taken by agent 'W'"):
            protocol.join(match.match_id, "B", "white")
        three = await protocol.open_match(job_id="job", environment=counter_ref())
        protocol.join(three.match_id, "A", "north")
        with pytest.raises(InvalidProtocolRequest, match="one agent takes one seat"):
            protocol.join(three.match_id, "A", "east")
        with pytest.raises(InvalidProtocolRequest, match="seat: expected one of black, white"):
            protocol.join(match.match_id, "W", "red")
        assert match.state is MatchState.WAITING_FOR_AGENTS
        protocol.join(match.match_id, "W", "white")
        assert match.state is MatchState.IN_PROGRESS
        with pytest.raises(InvalidProtocolRequest, match="seats: gomoku has no seat 'red'"):
            await protocol.open_match(job_id="job", environment=gomoku_ref(), agents_by_seat={"red": "W"})
        with pytest.raises(InvalidProtocolRequest, match="in turn order"):
            await protocol.open_match(job_id="job", environment=gomoku_ref(), seats=["white", "black"])

    asyncio.run(main())


def test_leaving_forfeits_a_match_in_progress_and_aborts_one_not_started() -> None:
    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        match = await seated(protocol, counter_ref(players=3))
        waiting = asyncio.create_task(protocol.await_turn(match.match_id, "agent-2"))
        await asyncio.sleep(0)
        await protocol.leave(match.match_id, "agent-1")
        end = await asyncio.wait_for(waiting, 1)
        assert end.finished and end.outcome == "win" and end.reward == pytest.approx(0.5)
        assert match.rewards_by_seat == {"north": 0.5, "east": -1.0, "south": 0.5}
        assert match.outcomes_by_seat["east"] == FORFEIT
        assert (await protocol.await_turn(match.match_id, "agent-0")).reward == pytest.approx(0.5)
        assert (await protocol.await_turn(match.match_id, "agent-0")).reward == 0.0  # delivered once
        await protocol.leave(match.match_id, "agent-0")  # leaving a finished match changes nothing
        assert match.rewards_by_seat["north"] == 0.5
        with pytest.raises(MatchOver):
            await protocol.submit(match.match_id, "agent-0", match.turn_index, "1")

        early = await protocol.open_match(job_id="job", environment=gomoku_ref())
        protocol.join(early.match_id, "A", "black")
        waiter = asyncio.create_task(protocol.await_turn(early.match_id, "A"))
        await asyncio.sleep(0)
        await protocol.leave(early.match_id, "A")
        assert early.state is MatchState.ABORTED
        with pytest.raises(AgentLost, match="left before the match started"):
            await asyncio.wait_for(waiter, 1)
        with pytest.raises(MatchOver):
            protocol.join(early.match_id, "B", "white")

    asyncio.run(main())


def test_a_forfeiting_illegal_move_ends_the_match_for_every_seat_with_the_final_view() -> None:
    """Gomoku's forfeiting move carries info["error"] (rejected) but ends the match: the others
    are told how it ended, not only the actor."""
    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        match = await seated(protocol, gomoku_ref(max_invalid_moves=0))
        await protocol.submit(match.match_id, "agent-0", 0, "a1")
        await protocol.await_turn(match.match_id, "agent-1")
        answer = await protocol.submit(match.match_id, "agent-1", 1, "a1")  # occupied: forfeits at once
        assert answer.finished and not answer.accepted and answer.outcome == "forfeit" and answer.reward == -1.0
        assert answer.observation.endswith("O forfeits")
        end = await protocol.await_turn(match.match_id, "agent-0")
        assert end.finished and end.outcome == "win" and end.reward == 1.0
        assert end.observation.endswith("O forfeits")
        assert match.rewards_by_seat == {"black": 1.0, "white": -1.0}

    asyncio.run(main())


def test_a_retried_submit_with_its_request_id_is_answered_once_even_after_the_end() -> None:
    async def main() -> None:
        opened: list = []
        protocol = AgentProtocol(catalog_factory(opened=opened))
        match = await seated(protocol, counter_ref(players=2, target=2))
        first = await protocol.submit(match.match_id, "agent-0", 0, "2", request_id="r1")
        assert first.finished and first.outcome == "win"
        for _ in range(2):
            assert await protocol.submit(match.match_id, "agent-0", 0, "2", request_id="r1") == first
        with pytest.raises(MatchOver, match="finished"):
            await protocol.submit(match.match_id, "agent-0", 0, "2", request_id="r2")
        assert len(match.history) == 1 and len(opened[0].steps) == 1
        assert match.totals_by_seat == {"north": 1.0, "east": -1.0}

    asyncio.run(main())


def test_a_broken_environment_aborts_the_match_and_every_waiter_learns_it() -> None:
    async def main() -> None:
        opened: list = []
        protocol = AgentProtocol(catalog_factory(opened=opened))
        match = await seated(protocol, gomoku_ref(environment="broken"))
        waiter = asyncio.create_task(protocol.await_turn(match.match_id, "agent-1"))
        await asyncio.sleep(0)
        with pytest.raises(MatchEnvironmentFailed) as failed:
            await protocol.submit(match.match_id, "agent-0", 0, "a1")
        assert failed.value.traceback == "Traceback: the game blew up"
        assert match.state is MatchState.ABORTED and "the environment failed" in match.message
        with pytest.raises(AgentLost, match="aborted"):
            await asyncio.wait_for(waiter, 1)
        with pytest.raises(MatchOver, match="aborted"):
            await protocol.submit(match.match_id, "agent-0", 0, "a1")
        await asyncio.sleep(0)
        assert opened[0].closed

    asyncio.run(main())


def test_a_cancelled_submit_keeps_the_match_and_the_game_in_step() -> None:
    """The caller of SubmitAction gives up (a client deadline) while the environment's step is
    under way: the step still counts, so the match and the game never disagree, and a retry
    with the request_id gets the answer."""
    async def main() -> None:
        opened: list = []
        protocol = AgentProtocol(catalog_factory(opened=opened))
        match = await seated(protocol, gomoku_ref(environment="slow_answer", size=4))
        submit = asyncio.create_task(protocol.submit(match.match_id, "agent-0", 0, "a1", request_id="r"))
        await asyncio.sleep(0.05)
        assert opened[0].steps == [("black", "a1")]  # the game took the move
        submit.cancel()
        with pytest.raises(asyncio.CancelledError):
            await submit
        retry = await protocol.submit(match.match_id, "agent-0", 0, "a1", request_id="r")
        assert retry.accepted and match.turn_index == 1 and match.current_seat == "white"
        assert [(a.seat, a.action) for a in match.history] == opened[0].steps == [("black", "a1")]
        turn = await protocol.await_turn(match.match_id, "agent-1")
        assert turn.turn_index == 1 and "X: a1" in turn.observation
        answer = await protocol.submit(match.match_id, "agent-1", 1, "b2")
        assert answer.accepted and match.state is MatchState.IN_PROGRESS

    asyncio.run(main())


def test_the_same_request_id_opens_one_match_also_when_opens_race() -> None:
    async def main() -> None:
        opened: list = []
        protocol = AgentProtocol(catalog_factory(opened=opened, start_delay_s=0.02))
        racing = await asyncio.gather(*(protocol.open_match(job_id="job", environment=gomoku_ref(), request_id="step-1")
                                        for _ in range(4)))
        assert len({m.match_id for m in racing}) == 1 and len(opened) == 1
        again = await protocol.open_match(job_id="job", environment=gomoku_ref(), request_id="step-1")
        assert again is racing[0]
        other_job = await protocol.open_match(job_id="job-2", environment=gomoku_ref(), request_id="step-1")
        fresh = await protocol.open_match(job_id="job", environment=gomoku_ref(), request_id="step-2")
        assert len({again.match_id, other_job.match_id, fresh.match_id}) == 3 and len(opened) == 3

    asyncio.run(main())


def test_an_open_whose_first_caller_gives_up_still_answers_the_others() -> None:
    """Two agents open the step's match with one request_id; the first one's call is cancelled
    while the game starts: the second still gets the match, and a retry gets the same one."""
    async def main() -> None:
        opened: list = []
        protocol = AgentProtocol(catalog_factory(opened=opened, start_delay_s=0.2))
        first = asyncio.create_task(protocol.open_match(job_id="job", environment=gomoku_ref(), request_id="r"))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(protocol.open_match(job_id="job", environment=gomoku_ref(), request_id="r"))
        await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        match = await asyncio.wait_for(second, 1)
        retry = await protocol.open_match(job_id="job", environment=gomoku_ref(), request_id="r")
        assert retry is match and protocol.get(match.match_id) is match
        assert len(opened) == 1

    asyncio.run(main())


def test_ended_matches_are_forgotten_beyond_the_limit_and_not_kept_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentinker_coordinator.protocol import agent_protocol

    monkeypatch.setattr(agent_protocol, "MAX_ENDED_MATCHES", 3)

    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        ids = []
        for i in range(8):
            match = await seated(protocol, counter_ref(players=2, target=1),
                                 request_id=f"r{i}" if i % 2 else "")
            await protocol.submit(match.match_id, "agent-0", 0, "1")
            ids.append(match.match_id)
        await protocol.open_match(job_id="job", environment=counter_ref())  # evicts
        ended = [m for m in protocol.matches.values() if m.ended]
        assert [m.match_id for m in ended] == ids[-3:]
        # nothing else holds on to a forgotten match (a retried open would hand out a match
        # GetMatch/JoinMatch no longer know)
        kept = {future.result().match_id for future in protocol.by_request.values() if future.done()}
        assert kept <= set(protocol.matches)

    asyncio.run(main())


def test_the_counter_race_is_a_zero_sum_three_seat_game() -> None:
    game = CounterRace()
    assert game.seats == SEAT_NAMES[:3]
    game.reset(seed=1)
    result = None
    for seat, action in [("north", "2"), ("east", "2"), ("south", "2"), ("north", "2"), ("east", "2")]:
        result = game.step(action, seat=seat)
    assert result is not None and result.done and result.reward == 1.0
    assert sum(result.info["rewards"].values()) == 0 and result.info["outcomes"]["east"] == "win"
