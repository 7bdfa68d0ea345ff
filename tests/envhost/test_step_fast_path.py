"""The Interact stream's step fast path (`SessionManager.step_soon`): a step of a job's session in
a shared game process, with no other call holding the session, is answered from the game's reply
callback instead of a task. It must answer exactly as the coroutine path does: in order per
session, with the same errors, through a lost process, and before the stream ends.

A real EnvHost on a socket with real shared game processes (`tests/envhost/test_servicer.py`)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_envhost.sessions import SessionManager
from tests.envhost._servicer import Requests, envhost_and_manager, struct

Code = grpc.StatusCode
LIMITS = {"memory_limit_mb": 64, "cpu_seconds_per_call": 5.0, "call_timeout_s": 30.0, "sessions_per_process": 4}


class Counted:
    """How many steps and resets the fast path (`step_soon`, `reset_soon`) took and declined."""

    def __init__(self, manager: SessionManager) -> None:
        self.taken = self.declined = self.resets_taken = 0
        step_soon, reset_soon = manager.step_soon, manager.reset_soon

        def counted_step_soon(*args: Any, **kwargs: Any) -> bool:
            taken = step_soon(*args, **kwargs)
            if taken:
                self.taken += 1
            else:
                self.declined += 1
            return taken

        def counted_reset_soon(*args: Any, **kwargs: Any) -> bool:
            taken = reset_soon(*args, **kwargs)
            self.resets_taken += taken
            return taken
        manager.step_soon = counted_step_soon  # type: ignore[method-assign]
        manager.reset_soon = counted_reset_soon  # type: ignore[method-assign]


def run(scenario: Any) -> None:
    async def main() -> None:
        async with envhost_and_manager(**LIMITS) as (stub, manager):
            await scenario(stub, manager, Counted(manager))
    asyncio.run(main())


async def opened(stub: Any, requests: Requests, responses: Any, job_id: str, start: int) -> str:
    """A tally session of `job_id`, reset to `start`."""
    requests.send(open_session=pb.OpenSessionRequest(env_name="tally", job_id=job_id))
    session_id = (await anext(responses)).open_session.session_id
    requests.send(reset=pb.ResetRequest(session_id=session_id, kwargs=struct(start=start)))
    assert (await anext(responses)).reset.observation == f"total {start}"
    return session_id


def test_pipelined_calls_of_a_session_apply_in_order_with_the_same_answers_as_the_coroutine_path() -> None:
    async def scenario(stub: Any, manager: SessionManager, counted: Counted) -> None:
        requests = Requests()
        responses = stub.Interact(requests.__aiter__()).__aiter__()
        session_id = await opened(stub, requests, responses, "job-order", 0)
        for action in ("1", "2", "3"):  # one at a time: each finds the session free
            requests.send(step=pb.StepRequest(session_id=session_id, action=action))
            answer = await anext(responses)
            assert answer.WhichOneof("result") == "step", answer
        assert answer.step.observation == "total 6"
        assert counted.taken == 3 and counted.declined == 0 and counted.resets_taken == 1  # opened's reset
        step = lambda action: requests.send(step=pb.StepRequest(session_id=session_id, action=action))  # noqa: E731
        sent = {"reset": requests.send(reset=pb.ResetRequest(session_id=session_id, kwargs=struct(start=10))),
                "+5": step("5"), "+7": step("7"),
                "raises": step("not a number"), "after": step("1"),
                "reset again": requests.send(reset=pb.ResetRequest(session_id=session_id)),
                "+2": step("2"),
                "unknown": requests.send(step=pb.StepRequest(session_id="no-such-session", action="1")),
                "seat": requests.send(step=pb.StepRequest(session_id=session_id, action="1", seat="white")),
                "bad kwargs": requests.send(reset=pb.ResetRequest(session_id=session_id, kwargs=struct(stop=1))),
                "close": requests.send(close_session=pb.CloseSessionRequest(session_id=session_id))}
        requests.end()
        answers = {response.sequence: response async for response in responses}
        got = {name: answers[sequence] for name, sequence in sent.items()}
        assert got["reset"].reset.observation == "total 10"
        assert [got["+5"].step.observation, got["+7"].step.observation] == ["total 15", "total 22"]
        assert got["raises"].error.code == Code.INTERNAL.value[0] and "ValueError" in got["raises"].error.message
        assert got["after"].error.code == Code.FAILED_PRECONDITION.value[0]
        assert "episode failed" in got["after"].error.message
        assert got["+2"].step.observation == "total 2"
        assert got["unknown"].error.code == Code.NOT_FOUND.value[0]
        assert got["seat"].error.code == Code.INVALID_ARGUMENT.value[0]
        assert got["bad kwargs"].error.code == Code.INVALID_ARGUMENT.value[0]
        assert "does not accept" in got["bad kwargs"].error.message
        assert got["close"].close_session.steps == 3 + 2 + 1  # the steps that returned a result
        assert counted.resets_taken >= 2  # the first pipelined reset found the session free
    run(scenario)


def test_a_lost_shared_process_fails_only_the_culprits_step_and_the_other_streams_go_on() -> None:
    async def scenario(stub: Any, manager: SessionManager, counted: Counted) -> None:
        streams = []
        for index in range(4):
            requests = Requests()
            responses = stub.Interact(requests.__aiter__()).__aiter__()
            streams.append((requests, responses, await opened(stub, requests, responses, "job-crash", 100 * index)))
        pids = {manager.sessions[session_id].game.pid for _, _, session_id in streams}
        assert len(pids) == 1, "a job's 4 sessions share one process"

        async def step(index: int, action: str) -> pb.InteractResponse:
            requests, responses, session_id = streams[index]
            requests.send(step=pb.StepRequest(session_id=session_id, action=action))
            return await anext(responses)

        await asyncio.gather(*(step(i, "1") for i in range(4)))
        crashed, *others = await asyncio.gather(step(0, "crash"), *(step(i, "5") for i in range(1, 4)))
        assert crashed.error.reason and "exited with code 3" in crashed.error.message
        assert [o.step.observation for o in others] == [f"total {100 * i + 6}" for i in range(1, 4)]
        again = await asyncio.gather(*(step(i, "1") for i in range(1, 4)))
        assert [a.step.observation for a in again] == [f"total {100 * i + 7}" for i in range(1, 4)]
        assert (await step(0, "1")).error.code == Code.FAILED_PRECONDITION.value[0]  # broken
        # 4 + 4 before and at the crash; the survivors' next steps take the fast path only once
        # their new process is up (they may come while it starts: then the awaited path moves them)
        assert counted.taken >= 8
        for requests, responses, _ in streams:
            requests.end()
            assert [r async for r in responses] == []
    run(scenario)


def test_a_stream_ended_with_steps_in_flight_gets_their_answers_first() -> None:
    async def scenario(stub: Any, manager: SessionManager, counted: Counted) -> None:
        requests = Requests()
        responses = stub.Interact(requests.__aiter__()).__aiter__()
        sessions = [await opened(stub, requests, responses, "job-drain", 0) for _ in range(3)]
        sent = [requests.send(step=pb.StepRequest(session_id=s, action="nap:0.2")) for s in sessions]
        requests.end()  # at once: the naps are still running
        answers = [response async for response in responses]
        assert sorted(a.sequence for a in answers) == sent
        assert all(a.step.observation == "total 0" for a in answers)
        assert counted.taken == 3
    run(scenario)


def test_a_cut_off_step_over_interact_goes_to_on_truncated_in_order_with_the_fast_paths_steps() -> None:
    async def scenario(stub: Any, manager: SessionManager, counted: Counted) -> None:
        requests = Requests()
        responses = stub.Interact(requests.__aiter__()).__aiter__()
        requests.send(open_session=pb.OpenSessionRequest(env_name="strict", job_id="job-cut"))
        session_id = (await anext(responses)).open_session.session_id
        requests.send(reset=pb.ResetRequest(session_id=session_id))
        assert (await anext(responses)).reset.observation == "go"
        requests.send(step=pb.StepRequest(session_id=session_id, action="fine"))
        requests.send(step=pb.StepRequest(session_id=session_id, action="rambling", truncated=True))
        whole, cut = await anext(responses), await anext(responses)
        assert (whole.step.reward, whole.step.done) == (1.0, False)
        assert (cut.step.reward, cut.step.done, cut.step.observation) == (-1.0, True, "cut after 8 chars")
        assert cut.step.info["cut"] is True
        assert counted.taken == 1 and counted.declined == 0  # the cut step went straight to the awaited path
        requests.send(reset=pb.ResetRequest(session_id=session_id))
        assert (await anext(responses)).reset.observation == "go"
        unary = await stub.Step(pb.StepRequest(session_id=session_id, action="abc", truncated=True))
        assert (unary.reward, unary.done, unary.observation) == (-1.0, True, "cut after 3 chars")
        requests.end()
    run(scenario)
