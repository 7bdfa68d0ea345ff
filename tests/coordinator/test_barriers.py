"""Global barriers of a multi-agent job: phases never overlap across agents, lost agents break
barriers at once (no deadlock), and arrivals in the wrong order, late or from strangers are
refused."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.protocol.barriers import PHASES, Arrival, BarrierKey
from opentinker_coordinator.protocol.matches import MatchState
from opentinker_coordinator.protocol.protocol_errors import (
    AgentLost,
    BarrierOutOfOrder,
    BarrierTimeout,
    InvalidProtocolRequest,
    MatchOver,
)
from opentinker_coordinator.protocol.seated_environment import MatchEnvironmentRef
from tests.coordinator.toy_games import catalog_factory

GOMOKU = MatchEnvironmentRef(env_name="gomoku", config={"size": 3, "win_length": 3})
PROMPTLY_S = 1.0


def run(main: Any) -> Any:
    return asyncio.run(main())


# -- the property: no agent starts a phase before every agent ended the one before -----------------


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    agents = draw(st.integers(2, 4))
    steps = draw(st.integers(1, 3))
    durations = st.sampled_from([0.0, 0.0, 0.0005, 0.001, 0.003])
    return {"agents": agents, "steps": steps, "adhoc": draw(st.booleans()),
            "durations": draw(st.lists(st.lists(durations, min_size=3 * steps, max_size=3 * steps),
                                       min_size=agents, max_size=agents)),
            "retries": draw(st.lists(st.booleans(), min_size=agents, max_size=agents)),
            "seed": draw(st.integers(0, 2**31))}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_no_agent_starts_a_phase_before_every_agent_ended_the_phase_before(job: dict[str, Any]) -> None:
    events: list[tuple[str, str, str, int]] = []  # (agent, "start" | "end", phase, step), in time order
    names = [f"agent-{i}" for i in range(job["agents"])]

    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        if job["adhoc"]:  # agents run by outside clients: the job learns them from JoinMatch
            for pair in range(0, len(names), 2):
                match = await protocol.open_match(job_id="job", environment=GOMOKU, request_id=f"m{pair}")
                for seat, name in zip(match.seats, (names + names[:1])[pair:pair + 2]):
                    protocol.join(match.match_id, name, seat)
        else:
            protocol.register_job("job", names)

        async def agent(i: int) -> None:
            rng = random.Random(job["seed"] + i)
            durations = iter(job["durations"][i])
            for step in range(job["steps"]):
                for phase in PHASES:
                    events.append((names[i], "start", phase, step))
                    await asyncio.sleep(next(durations))
                    events.append((names[i], "end", phase, step))
                    arrival = await protocol.arrive("job", names[i], phase, step, timeout_s=10)
                    assert arrival == Arrival(arrived=len(names), expected=len(names))
                    if job["retries"][i] and rng.random() < 0.5:  # a retried call (a lost answer)
                        assert await protocol.arrive("job", names[i], phase, step, timeout_s=10) == arrival

        async with asyncio.timeout(20):
            await asyncio.gather(*(agent(i) for i in range(len(names))))

    run(main)
    position = {event: i for i, event in enumerate(events)}
    order = [(step, phase) for step in range(job["steps"]) for phase in PHASES]
    for (step, phase), (next_step, next_phase) in zip(order, order[1:]):
        last_end = max(position[(name, "end", phase, step)] for name in names)
        first_start = min(position[(name, "start", next_phase, next_step)] for name in names)
        assert last_end < first_start, f"an agent started {next_phase} {next_step} before all ended {phase} {step}"
    assert len(events) == 2 * len(names) * len(order)


def test_barrier_keys_order_steps_then_phases() -> None:
    keys = [BarrierKey.of(phase, step) for step in range(3) for phase in PHASES]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert str(BarrierKey.of("UPDATE", 4)) == "(UPDATE, 4)"
    with pytest.raises(InvalidProtocolRequest, match="phase:"):
        BarrierKey.of("EVAL", 0)
    with pytest.raises(InvalidProtocolRequest, match="step: must be >= 0"):
        BarrierKey.of("ROLLOUT", -1)


# -- lost agents -------------------------------------------------------------------------------


def test_a_lost_agent_breaks_every_waiting_barrier_promptly() -> None:
    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        protocol.register_job("job", ["A", "B", "C"])
        await asyncio.gather(*(protocol.arrive("job", name, "ROLLOUT", 0) for name in "ABC"))
        waiting = [asyncio.create_task(protocol.arrive("job", name, "UPDATE", 0)) for name in "AB"]
        await asyncio.sleep(0.01)
        assert not any(task.done() for task in waiting)
        await protocol.agent_lost("job", "C", "worker w-3 stopped heartbeating")
        async with asyncio.timeout(PROMPTLY_S):
            for task in waiting:
                with pytest.raises(AgentLost, match=r"cannot open: lost C \(worker w-3 stopped heartbeating\)"):
                    await task
        async with asyncio.timeout(PROMPTLY_S):  # later arrivals too, at once, with or without a timeout
            with pytest.raises(AgentLost):
                await protocol.arrive("job", "A", "WEIGHT_SYNC", 0)
            with pytest.raises(AgentLost):
                await protocol.arrive("job", "B", "UPDATE", 0, timeout_s=30)
        # a barrier that opened before the loss stays open: a retry is answered as before
        assert await protocol.arrive("job", "C", "ROLLOUT", 0) == Arrival(arrived=3, expected=3)

    run(main)


def test_a_lost_agent_aborts_its_unfinished_matches_of_that_job_only() -> None:
    async def main() -> None:
        opened: list = []
        protocol = AgentProtocol(catalog_factory(opened=opened))

        async def match_of(job: str, black: str, white: str, *, reserve: bool = False) -> Any:
            match = await protocol.open_match(job_id=job, environment=GOMOKU,
                                              agents_by_seat={"white": white} if reserve else None)
            protocol.join(match.match_id, black, "black")
            if not reserve:
                protocol.join(match.match_id, white, "white")
            return match

        playing = await match_of("job", "A", "B")
        reserved = await match_of("job", "A", "B", reserve=True)  # B has not joined yet
        finished = await match_of("job", "A", "B")
        await protocol.leave(finished.match_id, "A")
        others = await match_of("job", "A", "C")
        elsewhere = await match_of("other-job", "A", "B")
        waiting_black = asyncio.create_task(protocol.await_turn(playing.match_id, "A"))
        waiting_white = asyncio.create_task(protocol.await_turn(playing.match_id, "B"))
        turn = await waiting_black
        assert not waiting_white.done()
        await protocol.submit(playing.match_id, "A", turn.turn_index, "a1")
        white_turn = await waiting_white
        waiting_white = asyncio.create_task(protocol.submit(playing.match_id, "B", white_turn.turn_index, "b2"))
        await waiting_white
        waiting_white = asyncio.create_task(protocol.await_turn(playing.match_id, "B"))
        await asyncio.sleep(0.01)
        assert not waiting_white.done()

        await protocol.agent_lost("job", "B", "worker lost")
        async with asyncio.timeout(PROMPTLY_S):
            with pytest.raises(AgentLost, match="agent 'B' was lost: worker lost"):
                await waiting_white
            with pytest.raises(AgentLost):
                await protocol.await_turn(playing.match_id, "A")
        with pytest.raises(MatchOver, match="aborted"):
            await protocol.submit(playing.match_id, "A", playing.turn_index, "c3")
        assert playing.state is MatchState.ABORTED and reserved.state is MatchState.ABORTED
        assert finished.state is MatchState.FINISHED and finished.outcomes_by_seat["black"] == "forfeit"
        assert others.state is MatchState.IN_PROGRESS and elsewhere.state is MatchState.IN_PROGRESS
        assert playing.rewards_by_seat == {} and len(playing.history) == 2
        await asyncio.sleep(0)
        assert [env.closed for env in opened] == [True, True, True, False, False]

    run(main)


# -- order, retries, timeouts and membership --------------------------------------------------


def test_arriving_out_of_order_is_refused_and_a_retry_is_fine() -> None:
    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        protocol.register_job("job", ["A"])
        assert await protocol.arrive("job", "A", "UPDATE", 0) == Arrival(arrived=1, expected=1)
        assert await protocol.arrive("job", "A", "UPDATE", 0) == Arrival(arrived=1, expected=1)
        with pytest.raises(BarrierOutOfOrder, match=r"already arrived at barrier \(UPDATE, 0\); \(ROLLOUT, 0\)"):
            await protocol.arrive("job", "A", "ROLLOUT", 0)
        await protocol.arrive("job", "A", "ROLLOUT", 1)
        with pytest.raises(BarrierOutOfOrder):
            await protocol.arrive("job", "A", "WEIGHT_SYNC", 0)
        with pytest.raises(InvalidProtocolRequest, match="phase:"):
            await protocol.arrive("job", "A", "EVAL", 1)
        with pytest.raises(InvalidProtocolRequest, match="job_id: is required"):
            await protocol.arrive("", "A", "ROLLOUT", 1)
        with pytest.raises(InvalidProtocolRequest, match="agent_id: is required"):
            await protocol.arrive("job", "", "ROLLOUT", 1)

    run(main)


def test_an_agent_that_skips_a_phase_does_not_deadlock_the_others() -> None:
    """An agent with nothing to do in a phase (e.g. no weight sync) may arrive at a later
    barrier directly; having passed it, it counts as arrived at the earlier ones."""
    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        protocol.register_job("job", ["A", "B"])
        async with asyncio.timeout(PROMPTLY_S):
            await asyncio.gather(protocol.arrive("job", "A", "ROLLOUT", 0), protocol.arrive("job", "B", "ROLLOUT", 0))
            skipping = asyncio.create_task(protocol.arrive("job", "A", "WEIGHT_SYNC", 0))
            await protocol.arrive("job", "B", "UPDATE", 0)
            await asyncio.sleep(0.01)
            assert not skipping.done(), "A passed WEIGHT_SYNC 0 before B arrived there"
            await protocol.arrive("job", "B", "WEIGHT_SYNC", 0)
            await skipping

    run(main)


def test_a_barrier_times_out_naming_the_missing_agents_and_a_retry_can_still_pass() -> None:
    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        protocol.register_job("job", ["A", "B", "C"])
        with pytest.raises(BarrierTimeout, match=r"barrier \(ROLLOUT, 2\) of job job: still waiting for B, C after 0.05 s"):
            await protocol.arrive("job", "A", "ROLLOUT", 2, timeout_s=0.05)
        retry = asyncio.create_task(protocol.arrive("job", "A", "ROLLOUT", 2, timeout_s=5))
        late = asyncio.create_task(protocol.arrive("job", "B", "ROLLOUT", 2, timeout_s=5))
        await asyncio.sleep(0.02)
        assert not retry.done() and not late.done()
        await protocol.arrive("job", "C", "ROLLOUT", 2, timeout_s=5)
        assert await retry == await late == Arrival(arrived=3, expected=3)

    run(main)


def test_a_fixed_job_refuses_strangers_and_an_adhoc_job_learns_its_agents_from_join_match() -> None:
    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        protocol.register_job("fixed", ["A", "B"])
        with pytest.raises(InvalidProtocolRequest, match="'X' is not an agent of job fixed"):
            await protocol.arrive("fixed", "X", "ROLLOUT", 0)
        match = await protocol.open_match(job_id="fixed", environment=GOMOKU)
        protocol.join(match.match_id, "A", "black")
        protocol.join(match.match_id, "X", "white")  # a stranger may play, but is no member
        both = await asyncio.gather(protocol.arrive("fixed", "A", "ROLLOUT", 0, timeout_s=1),
                                    protocol.arrive("fixed", "B", "ROLLOUT", 0, timeout_s=1))
        assert both == [Arrival(arrived=2, expected=2)] * 2

        adhoc = await protocol.open_match(job_id="adhoc", environment=GOMOKU)
        protocol.join(adhoc.match_id, "P", "black")
        protocol.join(adhoc.match_id, "Q", "white")
        alone = asyncio.create_task(protocol.arrive("adhoc", "P", "ROLLOUT", 0, timeout_s=1))
        await asyncio.sleep(0.01)
        assert not alone.done(), "P passed the barrier before Q, who joined a match of the job, arrived"
        assert await protocol.arrive("adhoc", "Q", "ROLLOUT", 0) == Arrival(arrived=2, expected=2)
        assert await alone == Arrival(arrived=2, expected=2)
        third = await protocol.open_match(job_id="adhoc", environment=GOMOKU)
        protocol.join(third.match_id, "R", "black")
        with pytest.raises(BarrierTimeout, match="still waiting for Q, R"):
            await protocol.arrive("adhoc", "P", "UPDATE", 0, timeout_s=0.02)

    run(main)


def test_registering_a_job_again_starts_its_barriers_afresh() -> None:
    async def main() -> None:
        protocol = AgentProtocol(catalog_factory())
        protocol.register_job("job", ["A"])
        await protocol.arrive("job", "A", "UPDATE", 3)
        await protocol.agent_lost("job", "A", "gone")
        protocol.register_job("job", ["A", "B"])  # a new attempt of the job
        both = await asyncio.gather(protocol.arrive("job", "A", "ROLLOUT", 0, timeout_s=1),
                                    protocol.arrive("job", "B", "ROLLOUT", 0, timeout_s=1))
        assert both == [Arrival(arrived=2, expected=2)] * 2

    run(main)
