"""EnvHostService in-process on a real socket (port 0) through the generated stubs: every
unary RPC, its status codes and error metadata, and the Interact stream (errors mid-stream,
concurrency across sessions)."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from opentinker_api.common.v1 import errors_pb2
from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_runtime.games import MathGame
from tests.envhost._servicer import Code, Requests, Stub, rpc_error, run, struct


async def open_reset(stub: Stub, env_name: str, config: dict[str, Any] | None = None,
                     **kwargs: Any) -> str:
    opened = await stub.OpenSession(pb.OpenSessionRequest(env_name=env_name, config=struct(**(config or {}))))
    await stub.Reset(pb.ResetRequest(session_id=opened.session_id, kwargs=struct(**kwargs)))
    return opened.session_id


async def trailing(error: grpc.aio.AioRpcError) -> dict[str, str | bytes]:
    return dict(error.trailing_metadata() or ())


def test_list_environments_with_paging() -> None:
    async def scenario(stub: Stub) -> None:
        listed = await stub.ListEnvironments(pb.ListEnvironmentsRequest())
        names = [env.name for env in listed.environments]
        assert names == sorted(names) and {"math", "echo", "seated"} <= set(names)
        assert listed.next_page_token == ""
        math = next(env for env in listed.environments if env.name == "math")
        assert (math.source, math.multi_turn) == ("builtin", False)
        assert math.description.startswith("Single-turn arithmetic")
        assert dict(math.default_config) == {"seed": 0.0, "difficulty": "easy", "eval_size": 32.0}
        seated = next(env for env in listed.environments if env.name == "seated")
        assert list(seated.seats) == ["black", "white"] and seated.source == "tests.envhost.games:Seated"
        paged, token = [], ""
        while True:
            page = await stub.ListEnvironments(pb.ListEnvironmentsRequest(page_size=2, page_token=token))
            assert len(page.environments) <= 2
            paged += [env.name for env in page.environments]
            token = page.next_page_token
            if not token:
                break
        assert paged == names
    run(scenario)


def test_a_math_episode_over_unary_rpcs() -> None:
    async def scenario(stub: Stub) -> None:
        opened = await stub.OpenSession(pb.OpenSessionRequest(
            env_name="math", config=struct(seed=11, difficulty="hard"), job_id="job-7"))
        assert opened.environment.name == "math" and len(opened.session_id) == 32
        reset = await stub.Reset(pb.ResetRequest(session_id=opened.session_id,
                                                 kwargs=struct(index=3, split="eval")))
        assert reset.observation == MathGame(seed=11, difficulty="hard").reset(index=3, split="eval")
        assert (reset.system_prompt, reset.initial_user_message) == ("Answer with the number only.", "")
        answer = str(eval(reset.observation.rstrip("=")))  # noqa: S307
        step = await stub.Step(pb.StepRequest(session_id=opened.session_id, action=f"\\boxed{{{answer}}}"))
        assert (step.reward, step.done, step.observation) == (1.0, True, "")
        assert step.info["correct"] is True and step.info["expected"] == answer
        assert step.info["extracted"] == answer and step.info["split"] == "eval"
        closed = await stub.CloseSession(pb.CloseSessionRequest(session_id=opened.session_id))
        assert closed.steps == 1
    run(scenario)


def test_open_with_request_id_is_idempotent() -> None:
    async def scenario(stub: Stub) -> None:
        request = pb.OpenSessionRequest(env_name="echo", request_id="open-1")
        first, again = await stub.OpenSession(request), await stub.OpenSession(request)
        assert first.session_id == again.session_id
        request.config.update({"turns": 9})
        error = await rpc_error(stub.OpenSession(request))
        assert error.code() == Code.INVALID_ARGUMENT
        assert (await trailing(error))["opentinker-reason"] == "ERROR_REASON_REQUEST_ID_REUSED"
    run(scenario)


def test_unary_status_codes_and_reasons() -> None:
    async def scenario(stub: Stub) -> None:
        cases = [
            (stub.OpenSession(pb.OpenSessionRequest(env_name="chess")), Code.NOT_FOUND,
             "ERROR_REASON_UNSPECIFIED", "env_name: no environment named 'chess'"),
            (stub.Step(pb.StepRequest(session_id="gone", action="x")), Code.NOT_FOUND,
             "ERROR_REASON_SESSION_NOT_FOUND", "session_id: no open session 'gone'"),
            (stub.OpenSession(pb.OpenSessionRequest(env_name="math", config=struct(colour="red"))),
             Code.INVALID_ARGUMENT, "ERROR_REASON_INVALID_FIELD", "config: MathGame()"),
            (stub.Reset(pb.ResetRequest()), Code.INVALID_ARGUMENT, "ERROR_REASON_INVALID_FIELD",
             "session_id: required"),
        ]
        for call, code, reason, message in cases:
            error = await rpc_error(call)
            assert (error.code(), (await trailing(error))["opentinker-reason"]) == (code, reason)
            assert message in error.details()
        opened = await stub.OpenSession(pb.OpenSessionRequest(env_name="echo"))
        error = await rpc_error(stub.Step(pb.StepRequest(session_id=opened.session_id, action="hi")))
        assert error.code() == Code.FAILED_PRECONDITION and "step before reset" in error.details()
    run(scenario)


def test_session_limit_is_resource_exhausted() -> None:
    async def scenario(stub: Stub) -> None:
        await stub.OpenSession(pb.OpenSessionRequest(env_name="echo"))
        error = await rpc_error(stub.OpenSession(pb.OpenSessionRequest(env_name="echo")))
        assert error.code() == Code.RESOURCE_EXHAUSTED
        assert (await trailing(error))["opentinker-reason"] == "ERROR_REASON_QUOTA_EXCEEDED"
    run(scenario, max_sessions=1)


def test_a_raising_game_is_internal_with_its_traceback_in_trailing_metadata() -> None:
    async def scenario(stub: Stub) -> None:
        session_id = await open_reset(stub, "explode")
        error = await rpc_error(stub.Step(pb.StepRequest(session_id=session_id, action="explode")))
        assert error.code() == Code.INTERNAL
        assert "Explode.step() raised ZeroDivisionError: boom in step" in error.details()
        metadata = await trailing(error)
        assert metadata["opentinker-reason"] == "ERROR_REASON_ENVIRONMENT_FAILED"
        assert metadata["opentinker-env-error-kind"] == "failed"
        traceback = metadata["opentinker-traceback-bin"].decode()
        assert "Traceback (most recent call last)" in traceback and "games.py" in traceback
        await stub.Reset(pb.ResetRequest(session_id=session_id))
        step = await stub.Step(pb.StepRequest(session_id=session_id, action="hi"))
        assert step.reward == 1.0 and step.info["left"] == 4.0
    run(scenario)


def test_a_slow_game_is_deadline_exceeded_with_reason_environment_timeout() -> None:
    async def scenario(stub: Stub) -> None:
        session_id = await open_reset(stub, "sleepy", {"seconds": 2})
        error = await rpc_error(stub.Step(pb.StepRequest(session_id=session_id, action="sleep")))
        assert error.code() == Code.DEADLINE_EXCEEDED
        metadata = await trailing(error)
        assert metadata["opentinker-reason"] == "ERROR_REASON_ENVIRONMENT_TIMEOUT"
        assert metadata["opentinker-env-error-kind"] == "timeout"
        error = await rpc_error(stub.Step(pb.StepRequest(session_id=session_id, action="x")))
        assert error.code() == Code.FAILED_PRECONDITION and "close it" in error.details()
    run(scenario, call_timeout_s=0.2)


def test_interact_answers_every_request_and_survives_errors() -> None:
    async def scenario(stub: Stub) -> None:
        requests = Requests()
        stream = stub.Interact(requests.__aiter__())
        responses = stream.__aiter__()
        requests.send(open_session=pb.OpenSessionRequest(env_name="explode"))
        opened = await anext(responses)
        assert opened.sequence == 1 and opened.WhichOneof("result") == "open_session"
        session_id = opened.open_session.session_id
        requests.send(step=pb.StepRequest(session_id=session_id, action="hi"))
        requests.send(reset=pb.ResetRequest(session_id=session_id))
        requests.send(step=pb.StepRequest(session_id=session_id, action="explode"))
        requests.send(step=pb.StepRequest(session_id=session_id, action="hi"))
        requests.send(reset=pb.ResetRequest(session_id=session_id, kwargs=struct(word="yo")))
        requests.send(step=pb.StepRequest(session_id=session_id, action="yo"))
        requests.send()  # no action at all
        requests.send(open_session=pb.OpenSessionRequest(env_name="nope"))
        requests.send(close_session=pb.CloseSessionRequest(session_id=session_id))
        requests.end()
        answers = {response.sequence: response async for response in responses}
        assert sorted(answers) == list(range(2, 11))
        kinds = {seq: answers[seq].WhichOneof("result") for seq in answers}
        assert kinds == {2: "error", 3: "reset", 4: "error", 5: "error", 6: "reset", 7: "step",
                         8: "error", 9: "error", 10: "close_session"}
        assert answers[2].error.code == Code.FAILED_PRECONDITION.value[0]
        boom = answers[4].error
        assert boom.code == Code.INTERNAL.value[0]
        assert boom.reason == errors_pb2.ERROR_REASON_ENVIRONMENT_FAILED
        assert "boom in step" in boom.message and "ZeroDivisionError: boom in step" in boom.traceback
        assert "episode failed" in answers[5].error.message
        assert answers[7].step.reward == 1.0
        assert answers[8].error.code == Code.INVALID_ARGUMENT.value[0]
        assert answers[8].error.message.startswith("action: set one of open_session")
        assert answers[9].error.code == Code.NOT_FOUND.value[0]
        assert answers[10].close_session.steps == 1
    run(scenario)


def test_interact_does_not_hold_fast_sessions_behind_a_slow_one() -> None:
    async def scenario(stub: Stub) -> None:
        slow = await open_reset(stub, "sleepy", {"seconds": 1.0})
        fast = await open_reset(stub, "echo", {"turns": 100})
        requests = Requests()
        started = time.monotonic()
        slow_sequence = requests.send(step=pb.StepRequest(session_id=slow, action="sleep"))
        for _ in range(10):
            requests.send(step=pb.StepRequest(session_id=fast, action="hi"))
        requests.end()
        arrivals = [(response.sequence, time.monotonic() - started)
                    async for response in stub.Interact(requests.__aiter__())]
        assert [seq for seq, _ in arrivals][-1] == slow_sequence
        fast_done = max(at for seq, at in arrivals if seq != slow_sequence)
        assert fast_done < 0.5, f"fast steps finished after {fast_done:.2f}s"
        assert arrivals[-1][1] >= 1.0
    run(scenario)


def test_a_huge_traceback_is_cut_to_fit_the_metadata_and_whole_in_the_stream() -> None:
    async def scenario(stub: Stub) -> None:
        session_id = await open_reset(stub, "explode")
        error = await rpc_error(stub.Step(pb.StepRequest(session_id=session_id, action="explode-big")))
        assert error.code() == Code.INTERNAL and "characters cut" in error.details()
        assert len(error.details()) < 1100
        traceback = (await trailing(error))["opentinker-traceback-bin"].decode()
        assert len(traceback) == 3000 and traceback.startswith("Traceback") and traceback.endswith("x\n")
        requests = Requests()
        await stub.Reset(pb.ResetRequest(session_id=session_id))
        requests.send(step=pb.StepRequest(session_id=session_id, action="explode-big"))
        requests.end()
        [answer] = [response async for response in stub.Interact(requests.__aiter__())]
        traceback = answer.error.traceback
        assert traceback.startswith("Traceback") and "_recurse" in traceback and traceback.endswith("x\n")
        assert len(traceback) == 20_000 and "characters cut" in traceback
    run(scenario)


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_text_utf8_cannot_carry_is_an_error_and_the_stream_goes_on(isolation: str) -> None:
    """A game answering a lone surrogate (or raising with one in its message) must not break the
    Interact stream or the unary call: it is an ENVIRONMENT_FAILED error in UTF-8."""
    async def scenario(stub: Stub) -> None:
        session_id = await open_reset(stub, "misbehaving")
        error = await rpc_error(stub.Step(pb.StepRequest(session_id=session_id, action="misbehave:non_utf8")))
        assert error.code() == Code.INTERNAL and "observation is not valid UTF-8 text" in error.details()
        requests = Requests()
        requests.send(reset=pb.ResetRequest(session_id=session_id))
        requests.send(step=pb.StepRequest(session_id=session_id, action="misbehave:non_utf8"))
        requests.send(reset=pb.ResetRequest(session_id=session_id, kwargs=struct(behaviour="reset:non_utf8")))
        requests.send(reset=pb.ResetRequest(session_id=session_id))
        requests.send(step=pb.StepRequest(session_id=session_id, action="ok"))
        requests.end()
        stream = stub.Interact(requests.__aiter__())
        answers = {response.sequence: response async for response in stream}
        assert await stream.code() == Code.OK
        kinds = [answers[seq].WhichOneof("result") for seq in sorted(answers)]
        assert kinds == ["reset", "error", "error", "reset", "step"]
        assert "step() observation is not valid UTF-8 text" in answers[2].error.message
        assert "reset() observation is not valid UTF-8 text" in answers[3].error.message
        assert answers[2].error.reason == errors_pb2.ERROR_REASON_ENVIRONMENT_FAILED
        assert answers[5].step.observation == "ok"
    run(scenario, isolation=isolation)


def test_nan_in_a_config_is_invalid_argument_naming_the_field_unary_and_in_stream() -> None:
    """NaN has no JSON form: the EnvHost answered UNKNOWN (unary) or nothing at all (Interact)."""
    async def scenario(stub: Stub) -> None:
        bad = struct(a=float("nan"))
        error = await rpc_error(stub.OpenSession(pb.OpenSessionRequest(env_name="math", config=bad)))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and error.details().startswith("config: ")

        async def requests():
            yield pb.InteractRequest(sequence=7, open_session=pb.OpenSessionRequest(env_name="math", config=bad))
        answers = [answer async for answer in stub.Interact(requests())]
        assert [a.sequence for a in answers] == [7] and answers[0].error.message.startswith("config: ")
    run(scenario)
