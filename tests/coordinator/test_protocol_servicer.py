"""The Agent Protocol over gRPC: a real grpc.aio server on a free local port with the
CoordinatorServicer (games in-process), driven through the generated stubs. Every protocol
error is checked for its status code and its `opentinker-reason` trailing metadata."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from opentinker_api.common.v1 import environment_pb2, errors_pb2, progress_pb2
from opentinker_api.coordinator.v1 import coordinator_service_pb2 as pb
from opentinker_api.coordinator.v1 import coordinator_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.errors import REASON_METADATA_KEY, TRACEBACK_METADATA_KEY
from opentinker_runtime.edge.status import status_code
from opentinker_coordinator.protocol import protocol_errors
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.runs import RunRegistry, RunState
from opentinker_coordinator.servicer import coordinator_service_binding
from tests.coordinator._protocol import refused
from tests.coordinator.toy_games import catalog_factory

Code = grpc.StatusCode
ROLLOUT, UPDATE = progress_pb2.PHASE_ROLLOUT, progress_pb2.PHASE_UPDATE


@dataclass
class Coordinator:
    stub: pb_grpc.CoordinatorServiceStub
    protocol: AgentProtocol
    opened: list


@asynccontextmanager
async def coordinator(**factory: Any) -> AsyncIterator[Coordinator]:
    opened: list = []
    protocol = AgentProtocol(catalog_factory(opened=opened, **factory))

    async def launcher(run: RunState) -> None:  # no jobs are driven here
        await run.stop.wait()

    registry = RunRegistry(launcher)
    binding = coordinator_service_binding(registry, protocol)
    server = grpc.aio.server()
    binding.add_to_server(binding.servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Coordinator(pb_grpc.CoordinatorServiceStub(channel), protocol, opened)
    finally:
        await server.stop(0)
        await protocol.close()
        await registry.close()


def run(scenario: Callable[[Coordinator], Awaitable[None]], **factory: Any) -> None:
    async def main() -> None:
        async with coordinator(**factory) as c:
            async with asyncio.timeout(20):
                await scenario(c)
    asyncio.run(main())


def environment(env_name: str = "gomoku", **config: Any) -> environment_pb2.EnvironmentReference:
    struct = struct_pb2.Struct()
    struct.update(config)
    return environment_pb2.EnvironmentReference(env_name=env_name, config=struct)


def gomoku(**config: Any) -> environment_pb2.EnvironmentReference:
    return environment("gomoku", **({"size": 3, "win_length": 3} | config))


async def open_seated(c: Coordinator, env: environment_pb2.EnvironmentReference | None = None,
                      agents: tuple[str, ...] = ("A", "B"), job_id: str = "job") -> pb.Match:
    opened = await c.stub.OpenMatch(pb.OpenMatchRequest(job_id=job_id, environment=env or gomoku()))
    for agent, seat in zip(agents, opened.match.seats):
        await c.stub.JoinMatch(pb.JoinMatchRequest(match_id=opened.match.match_id, agent_id=agent, seat=seat))
    return opened.match


# -- a whole game --------------------------------------------------------------------------


def test_a_full_game_over_the_stubs() -> None:
    async def scenario(c: Coordinator) -> None:
        opened = await c.stub.OpenMatch(pb.OpenMatchRequest(job_id="job", environment=gomoku(), request_id="s0"))
        match_id = opened.match.match_id
        assert opened.match.state == pb.Match.STATE_WAITING_FOR_AGENTS
        assert list(opened.match.seats) == ["black", "white"] and opened.match.current_seat == "black"
        joined = await c.stub.JoinMatch(pb.JoinMatchRequest(match_id=match_id, agent_id="A", seat="black"))
        assert joined.system_prompt.startswith("Gomoku: 3 in a row wins")
        joined = await c.stub.JoinMatch(pb.JoinMatchRequest(match_id=match_id, agent_id="B", seat="white"))
        assert joined.match.state == pb.Match.STATE_IN_PROGRESS
        assert dict(joined.match.agents_by_seat) == {"black": "A", "white": "B"}

        async def agent(agent_id: str, moves: list[str]) -> dict[str, Any]:
            seen: dict[str, Any] = {"observations": [], "rewards": [], "answers": []}
            moves = list(moves)
            while True:
                turn = await c.stub.AwaitTurn(pb.AwaitTurnRequest(match_id=match_id, agent_id=agent_id))
                seen["observations"].append(turn.observation)
                seen["rewards"].append(turn.reward)
                if turn.match_finished:
                    seen["outcome"] = turn.outcome
                    return seen
                answer = await c.stub.SubmitAction(pb.SubmitActionRequest(
                    match_id=match_id, agent_id=agent_id, turn_index=turn.turn_index, action=moves.pop(0)))
                seen["answers"].append(answer)
                seen["rewards"].append(answer.reward)

        black, white = await asyncio.gather(agent("A", ["a1", "zz", "b1", "c1"]), agent("B", ["a2", "b2"]))
        illegal = black["answers"][1]
        assert not illegal.accepted and illegal.reward == -0.5 and illegal.observation.startswith("Illegal")
        assert black["answers"][-1].match_finished and black["answers"][-1].outcome == "win"
        assert black["outcome"] == "win" and white["outcome"] == "loss"
        assert white["observations"][-1].endswith("X wins") and white["rewards"][-1] == -1.0
        assert not any("Illegal" in text for text in white["observations"])
        assert any("Illegal" in text for text in black["observations"])  # its inbox: it moved again

        got = (await c.stub.GetMatch(pb.GetMatchRequest(match_id=match_id))).match
        assert got.state == pb.Match.STATE_FINISHED and got.current_seat == "" and got.turn_index == 6
        assert [(a.turn_index, a.seat, a.agent_id, a.action, a.accepted, a.reward) for a in got.history] == [
            (0, "black", "A", "a1", True, 0.0), (1, "white", "B", "a2", True, 0.0),
            (2, "black", "A", "zz", False, -0.5), (3, "black", "A", "b1", True, 0.0),
            (4, "white", "B", "b2", True, 0.0), (5, "black", "A", "c1", True, 1.0)]
        assert dict(got.rewards_by_seat) == {"black": 1.0, "white": -1.0}
        assert dict(got.outcomes_by_seat) == {"black": "win", "white": "loss"}
        assert got.environment.env_name == "gomoku" and dict(got.environment.config) == {"size": 3, "win_length": 3}
        assert sum(black["rewards"]) == 0.5 and sum(white["rewards"]) == -1.0  # penalty included, once each
        again = await c.stub.OpenMatch(pb.OpenMatchRequest(job_id="job", environment=gomoku(), request_id="s0"))
        assert again.match == got
        await refused(c.stub.SubmitAction(pb.SubmitActionRequest(match_id=match_id, agent_id="B", turn_index=6,
                                                                 action="c3")),
                      Code.FAILED_PRECONDITION, "MATCH_FINISHED", "is finished")

    run(scenario)


def test_a_three_seat_game_over_the_stubs() -> None:
    async def scenario(c: Coordinator) -> None:
        match = await open_seated(c, environment("counter", players=3, target=4), agents=("N", "E", "S"))
        assert list(match.seats) == ["north", "east", "south"]
        plays = [("N", "3"), ("S", "1")]  # 3 skips east; south reaches 4
        for agent_id, action in plays:
            turn = await c.stub.AwaitTurn(pb.AwaitTurnRequest(match_id=match.match_id, agent_id=agent_id))
            await c.stub.SubmitAction(pb.SubmitActionRequest(match_id=match.match_id, agent_id=agent_id,
                                                             turn_index=turn.turn_index, action=action))
        east = await c.stub.AwaitTurn(pb.AwaitTurnRequest(match_id=match.match_id, agent_id="E"))
        assert east.match_finished and east.outcome == "loss" and east.reward == -0.5
        assert "secret:east:" in east.observation and "secret:north:" not in east.observation
        got = (await c.stub.GetMatch(pb.GetMatchRequest(match_id=match.match_id))).match
        assert [a.seat for a in got.history] == ["north", "south"]
        assert dict(got.rewards_by_seat) == {"north": -0.5, "east": -0.5, "south": 1.0}

    run(scenario)


# -- errors: status codes and reasons --------------------------------------------------------


def test_turn_errors() -> None:
    async def scenario(c: Coordinator) -> None:
        match = await open_seated(c)
        submit = lambda agent, turn, action="a1": c.stub.SubmitAction(  # noqa: E731
            pb.SubmitActionRequest(match_id=match.match_id, agent_id=agent, turn_index=turn, action=action))
        await refused(submit("B", 0), Code.FAILED_PRECONDITION, "NOT_YOUR_TURN", "black is to move")
        await refused(submit("A", 3), Code.FAILED_PRECONDITION, "NOT_YOUR_TURN", "turn_index: the turn to play is 0")
        await submit("A", 0)
        await refused(submit("A", 0, "b1"), Code.FAILED_PRECONDITION, "NOT_YOUR_TURN")
        await refused(submit("B", 0, "b1"), Code.FAILED_PRECONDITION, "NOT_YOUR_TURN")
        got = (await c.stub.GetMatch(pb.GetMatchRequest(match_id=match.match_id))).match
        assert len(got.history) == 1 and got.current_seat == "white" and got.turn_index == 1
        await refused(submit("C", 1), Code.INVALID_ARGUMENT, "INVALID_FIELD", "has not joined")
        await refused(c.stub.AwaitTurn(pb.AwaitTurnRequest(match_id=match.match_id, agent_id="C")),
                      Code.INVALID_ARGUMENT, "INVALID_FIELD", "call JoinMatch first")

    run(scenario)


def test_match_and_seat_errors() -> None:
    async def scenario(c: Coordinator) -> None:
        unknown = "no-such-match"
        for call in (c.stub.GetMatch(pb.GetMatchRequest(match_id=unknown)),
                     c.stub.JoinMatch(pb.JoinMatchRequest(match_id=unknown, agent_id="A", seat="black")),
                     c.stub.AwaitTurn(pb.AwaitTurnRequest(match_id=unknown, agent_id="A")),
                     c.stub.SubmitAction(pb.SubmitActionRequest(match_id=unknown, agent_id="A", action="a1")),
                     c.stub.LeaveMatch(pb.LeaveMatchRequest(match_id=unknown, agent_id="A"))):
            await refused(call, Code.NOT_FOUND, "MATCH_NOT_FOUND", "no match 'no-such-match'")

        missing = [
            (c.stub.OpenMatch(pb.OpenMatchRequest(environment=gomoku())), "job_id: is required"),
            (c.stub.OpenMatch(pb.OpenMatchRequest(job_id="job")), "environment.env_name: is required"),
            (c.stub.OpenMatch(pb.OpenMatchRequest(job_id="job", environment=gomoku(), seats=["white", "black"])),
             "seats: gomoku has seats black, white"),
            (c.stub.GetMatch(pb.GetMatchRequest()), "match_id: is required"),
            (c.stub.AwaitTurn(pb.AwaitTurnRequest(agent_id="A")), "match_id: is required"),
        ]
        for call, details in missing:
            await refused(call, Code.INVALID_ARGUMENT, "INVALID_FIELD", details)

        opened = (await c.stub.OpenMatch(pb.OpenMatchRequest(job_id="job", environment=gomoku()))).match
        join = lambda agent, seat: c.stub.JoinMatch(  # noqa: E731
            pb.JoinMatchRequest(match_id=opened.match_id, agent_id=agent, seat=seat))
        await refused(join("", "black"), Code.INVALID_ARGUMENT, "INVALID_FIELD", "agent_id: is required")
        await refused(join("A", "red"), Code.INVALID_ARGUMENT, "INVALID_FIELD", "seat: expected one of black, white")
        await join("A", "black")
        await join("A", "black")  # idempotent
        await refused(join("B", "black"), Code.FAILED_PRECONDITION, "SEAT_TAKEN", "taken by agent 'A'")
        await refused(join("A", "white"), Code.INVALID_ARGUMENT, "INVALID_FIELD", "one agent takes one seat")
        await join("B", "white")
        left = (await c.stub.LeaveMatch(pb.LeaveMatchRequest(match_id=opened.match_id, agent_id="B"))).match
        assert left.state == pb.Match.STATE_FINISHED and dict(left.outcomes_by_seat) == {"black": "win", "white": "forfeit"}
        assert dict(left.rewards_by_seat) == {"black": 1.0, "white": -1.0} and "left and forfeits" in left.message
        await refused(c.stub.SubmitAction(pb.SubmitActionRequest(match_id=opened.match_id, agent_id="A", action="a1")),
                      Code.FAILED_PRECONDITION, "MATCH_FINISHED")
        await refused(join("C", "green"), Code.INVALID_ARGUMENT, "INVALID_FIELD")

    run(scenario)


def test_a_single_agent_environment_cannot_host_a_match() -> None:
    async def scenario(c: Coordinator) -> None:
        await refused(c.stub.OpenMatch(pb.OpenMatchRequest(job_id="job", environment=environment("math"))),
                      Code.INVALID_ARGUMENT, "INVALID_FIELD", "math is not a multi-agent game")
        assert len(c.opened) == 1 and c.opened[0].closed

    run(scenario)


def test_a_lost_agent_aborts_its_match_and_its_barriers_over_the_wire() -> None:
    async def scenario(c: Coordinator) -> None:
        match = await open_seated(c)
        white_waits = asyncio.ensure_future(c.stub.AwaitTurn(pb.AwaitTurnRequest(match_id=match.match_id, agent_id="B")))
        arrived = asyncio.ensure_future(c.stub.ArriveAtBarrier(
            pb.ArriveAtBarrierRequest(job_id="job", agent_id="B", phase=ROLLOUT, step=0), timeout=10))
        await asyncio.sleep(0.1)
        assert not white_waits.done() and not arrived.done()
        await c.protocol.agent_lost("job", "A", "worker w-1 lost")
        await refused(white_waits, Code.ABORTED, "AGENT_LOST", "agent 'A' was lost: worker w-1 lost")
        await refused(arrived, Code.ABORTED, "AGENT_LOST", "lost A (worker w-1 lost)")
        await refused(c.stub.AwaitTurn(pb.AwaitTurnRequest(match_id=match.match_id, agent_id="A")),
                      Code.ABORTED, "AGENT_LOST")
        await refused(c.stub.SubmitAction(pb.SubmitActionRequest(match_id=match.match_id, agent_id="A", action="a1")),
                      Code.FAILED_PRECONDITION, "MATCH_FINISHED", "aborted")
        got = (await c.stub.GetMatch(pb.GetMatchRequest(match_id=match.match_id))).match
        assert got.state == pb.Match.STATE_ABORTED and "was lost" in got.message

    run(scenario)


def test_a_broken_environment_is_unavailable_with_the_games_traceback() -> None:
    async def scenario(c: Coordinator) -> None:
        match = await open_seated(c, gomoku(environment="broken"))
        error = await refused(c.stub.SubmitAction(pb.SubmitActionRequest(match_id=match.match_id, agent_id="A",
                                                                          action="a1")),
                              Code.UNAVAILABLE, "ENVIRONMENT_FAILED", "the environment failed")
        assert dict(error.trailing_metadata())[TRACEBACK_METADATA_KEY] == b"Traceback: the game blew up"
        await refused(c.stub.AwaitTurn(pb.AwaitTurnRequest(match_id=match.match_id, agent_id="B")),
                      Code.ABORTED, "AGENT_LOST", "the environment failed")

    run(scenario)


def test_a_submit_whose_client_gives_up_still_counts_and_its_retry_gets_the_answer() -> None:
    async def scenario(c: Coordinator) -> None:
        match = await open_seated(c, gomoku(environment="slow_answer", size=4))
        request = pb.SubmitActionRequest(match_id=match.match_id, agent_id="A", turn_index=0, action="b2",
                                         request_id="A-0")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await c.stub.SubmitAction(request, timeout=0.05)
        assert caught.value.code() == Code.DEADLINE_EXCEEDED
        answer = await c.stub.SubmitAction(request)
        assert answer.accepted and "X: b2" in answer.observation
        got = (await c.stub.GetMatch(pb.GetMatchRequest(match_id=match.match_id))).match
        assert [(a.seat, a.action) for a in got.history] == [("black", "b2")] and got.current_seat == "white"
        assert c.opened[0].steps == [("black", "b2")]

    run(scenario)


# -- barriers ------------------------------------------------------------------------------


def test_barriers_over_the_wire() -> None:
    async def scenario(c: Coordinator) -> None:
        c.protocol.register_job("job", ["A", "B"])
        arrive = lambda agent, phase, step, **kw: c.stub.ArriveAtBarrier(  # noqa: E731
            pb.ArriveAtBarrierRequest(job_id="job", agent_id=agent, phase=phase, step=step), **kw)
        both = await asyncio.gather(arrive("A", ROLLOUT, 0), arrive("B", ROLLOUT, 0))
        assert [(r.agents_arrived, r.agents_expected) for r in both] == [(2, 2), (2, 2)]
        # with a client deadline and B elsewhere: DEADLINE_EXCEEDED (the server's answer or the client's own)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await arrive("A", UPDATE, 0, timeout=0.2)
        assert caught.value.code() == Code.DEADLINE_EXCEEDED
        # without a deadline it waits; A's arrival still counts, so B passes and A's retry too
        retry = asyncio.ensure_future(arrive("A", UPDATE, 0))
        await asyncio.sleep(0.1)
        assert not retry.done()
        assert (await arrive("B", UPDATE, 0)).agents_arrived == 2
        assert (await retry).agents_arrived == 2
        for phase in (progress_pb2.PHASE_UNSPECIFIED, progress_pb2.PHASE_EVAL):
            await refused(arrive("A", phase, 0), Code.INVALID_ARGUMENT, "INVALID_FIELD", "phase:")
        await refused(arrive("A", ROLLOUT, 0), Code.FAILED_PRECONDITION, "INVALID_FIELD", "already arrived")
        await refused(arrive("X", ROLLOUT, 1), Code.INVALID_ARGUMENT, "INVALID_FIELD", "not an agent of job job")
        await refused(arrive("", ROLLOUT, 1), Code.INVALID_ARGUMENT, "INVALID_FIELD", "agent_id: is required")
        await refused(c.stub.ArriveAtBarrier(pb.ArriveAtBarrierRequest(agent_id="A", phase=ROLLOUT, step=1)),
                      Code.INVALID_ARGUMENT, "INVALID_FIELD", "job_id: is required")

    run(scenario)


def test_a_barrier_timeout_names_the_missing_agents() -> None:
    async def scenario(c: Coordinator) -> None:
        c.protocol.register_job("job", ["A", "B", "C"])
        # the server gives up just before the client does; either way the code is DEADLINE_EXCEEDED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await c.stub.ArriveAtBarrier(pb.ArriveAtBarrierRequest(job_id="job", agent_id="A", phase=ROLLOUT, step=0),
                                         timeout=0.3)
        assert caught.value.code() == Code.DEADLINE_EXCEEDED
        if dict(caught.value.trailing_metadata() or ()).get(REASON_METADATA_KEY):  # the server's answer
            assert "still waiting for B, C" in caught.value.details()

    run(scenario)


# -- opening -------------------------------------------------------------------------------


def test_open_match_with_the_same_request_id_returns_the_same_match_also_when_opens_race() -> None:
    async def scenario(c: Coordinator) -> None:
        request = pb.OpenMatchRequest(job_id="job", environment=gomoku(), request_id="step-3/pair-0")
        racing = await asyncio.gather(*(c.stub.OpenMatch(request) for _ in range(3)))
        assert len({r.match.match_id for r in racing}) == 1 and len(c.opened) == 1
        assert (await c.stub.OpenMatch(request)).match.match_id == racing[0].match.match_id
        other = await c.stub.OpenMatch(pb.OpenMatchRequest(job_id="job", environment=gomoku(), request_id="x"))
        plain = await c.stub.OpenMatch(pb.OpenMatchRequest(job_id="job", environment=gomoku()))
        plain_again = await c.stub.OpenMatch(pb.OpenMatchRequest(job_id="job", environment=gomoku()))
        assert len({racing[0].match.match_id, other.match.match_id, plain.match.match_id,
                    plain_again.match.match_id}) == 4

    run(scenario, start_delay_s=0.05)


def test_every_protocol_error_has_a_reason_clients_can_parse() -> None:
    errors = [cls for cls in vars(protocol_errors).values()
              if isinstance(cls, type) and issubclass(cls, protocol_errors.ProtocolError)]
    assert len(errors) >= 10
    for cls in errors:
        errors_pb2.ErrorReason.Value(f"ERROR_REASON_{cls.reason}")
    expected = {protocol_errors.NotYourTurn: Code.FAILED_PRECONDITION, protocol_errors.MatchOver: Code.FAILED_PRECONDITION,
                protocol_errors.SeatTaken: Code.FAILED_PRECONDITION, protocol_errors.MatchNotFound: Code.NOT_FOUND,
                protocol_errors.InvalidProtocolRequest: Code.INVALID_ARGUMENT, protocol_errors.AgentLost: Code.ABORTED,
                protocol_errors.BarrierTimeout: Code.DEADLINE_EXCEEDED,
                protocol_errors.BarrierOutOfOrder: Code.FAILED_PRECONDITION}
    for cls, code in expected.items():
        assert status_code(cls("x")) == code
    assert status_code(protocol_errors.MatchEnvironmentFailed("x")) == Code.UNAVAILABLE
