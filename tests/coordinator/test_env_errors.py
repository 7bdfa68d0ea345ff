"""Environment errors reach the job: from the game through the EnvHost and the Rollout's EnvHost
client to the Coordinator, which tells the first of each distinct error (with the game's
traceback, trimmed) in the job's log, counts the repeats, and names the cause when a batch or an
evaluation stays unusable.

The first tests play a real EnvHost (its servicer and session manager, games in threads) on a
real port through the Rollout's own EnvHost sessions (Interact stream and unary calls), and read
the text an episode's `env_error` would carry; the others drive the RL, multi-agent and
inference drivers with in-process ports whose episodes fail with such texts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import pytest

from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_runtime.core.settings import ServiceSettings, port_setting
from opentinker_runtime.games import builtin_games
from opentinker_coordinator.driver.env_errors import EnvError, EnvErrorDigest, EnvErrorKind
from opentinker_coordinator.driver.env_outages import EnvironmentBroken, OutageBudget
from opentinker_coordinator.driver.inference_driver import InferencePorts, run_inference
from opentinker_coordinator.driver.plans import InferencePlan, RlPlan
from opentinker_coordinator.driver.rl_driver import RlPorts, run_rl
from opentinker_coordinator.types import StopReason, Trajectory
from opentinker_envhost.catalog import GameCatalog
from opentinker_envhost.limits import Isolation, SessionLimits
from opentinker_envhost.sandbox_protocol import EXIT_MEMORY, describe_exit
from opentinker_envhost.servicer import envhost_service_binding
from opentinker_envhost.sessions import SessionManager
from opentinker_rollout.environment import EnvironmentFailure, with_traceback_tail
from opentinker_rollout.envhost_client import EnvHostChannels, EnvHostSession, EnvironmentTarget, InteractSession
from tests.coordinator.fakes import RecordingReporter, RecordingTrainer, ScriptedRollout, VersionSync

pytestmark = pytest.mark.timeout(60)
GAMES = "explode=tests.envhost.games:Explode,sleepy=tests.envhost.games:Sleepy"
QUICK = OutageBudget(seconds=5.0, initial_delay=0.01, max_delay=0.02, broken_game_delay=0.01)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TESTENV_"
    port: int = port_setting(0)


@asynccontextmanager
async def envhost() -> AsyncIterator[str]:
    """A real EnvHost serving the test games (a call times out after 0.3 s); its address."""
    manager = SessionManager(GameCatalog.from_setting(GAMES),
                             SessionLimits(isolation=Isolation.THREAD, call_timeout_s=0.3))
    server = await start_server(EnvSettings(auth="disabled"), ServerPlan(services=[envhost_service_binding(manager)]))
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        await stop_server(server, grace_seconds=1)
        await manager.close_all()


async def env_error_of(address: str, env_name: str, *, config: dict[str, Any] | None = None,
                       action: str = "", interact: bool = True) -> str:
    """The text an episode's env_error carries when open, reset or step(`action`) fails."""
    channels = EnvHostChannels()
    target = EnvironmentTarget(address=address, env_name=env_name, config=config or {})
    session = (InteractSession(channels.stub(target), target, unary_only=set(), call_timeout_s=5) if interact
               else EnvHostSession(channels.stub(target), target, call_timeout_s=5))
    try:
        await session.open()
        await session.reset({}, 0)
        await session.step(action)
    except EnvironmentFailure as failure:
        return str(failure)
    finally:
        try:
            await session.close()
        except EnvironmentFailure:
            pass
        await channels.close()
    raise AssertionError("the environment did not fail")


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("interact", [True, False], ids=["interact", "unary"])
def test_a_game_that_raises_in_step_reaches_the_coordinator_as_its_kind_with_its_traceback(interact: bool):
    async def scenario() -> str:
        async with envhost() as address:
            return await env_error_of(address, "explode", action="explode", interact=interact)

    error = EnvError.of(asyncio.run(scenario()))
    assert error.kind is EnvErrorKind.GAME_RAISED and error.label == "the game raised in step"
    assert "Step failed: INTERNAL:" in error.message and "ZeroDivisionError: boom in step" in error.message
    assert "\n" not in error.message
    lines = error.traceback.splitlines()
    assert lines[0].startswith("Traceback (most recent call last)"), lines
    assert any("games.py" in line and "in step" in line for line in lines), lines  # the game's own frame
    assert lines[-1] == "ZeroDivisionError: boom in step"


@pytest.mark.parametrize(("env_name", "config", "action", "kind", "label", "words"), [
    ("revers", {}, "", EnvErrorKind.UNKNOWN_ENVIRONMENT, "unknown environment",
     "no environment named 'revers'; known: " + ", ".join(sorted({*builtin_games(), "explode", "sleepy"}))),
    ("explode", {"fail_in": "reset"}, "", EnvErrorKind.GAME_RAISED, "the game raised in reset", "KeyError"),
    ("explode", {"fail_in": "init"}, "", EnvErrorKind.GAME_RAISED, "the game raised in open", "boom in init"),
    ("sleepy", {"seconds": 2}, "sleep", EnvErrorKind.TIMEOUT, "timeout in step", "did not return within 0.3s"),
    ("explode", {"no_such": 1}, "", EnvErrorKind.INVALID_INPUT, "invalid config or arguments", "no_such"),
])
def test_each_kind_of_environment_failure_is_told_apart(env_name: str, config: dict, action: str,
                                                        kind: EnvErrorKind, label: str, words: str):
    async def scenario() -> str:
        async with envhost() as address:
            return await env_error_of(address, env_name, config=config, action=action)

    error = EnvError.of(asyncio.run(scenario()))
    assert (error.kind, error.label) == (kind, label), error
    assert words in error.message, error.message


@pytest.mark.parametrize(("wait_status", "kind"), [
    (signal.SIGXCPU, EnvErrorKind.CPU_LIMIT), (EXIT_MEMORY << 8, EnvErrorKind.MEMORY_LIMIT),
    (signal.SIGKILL, EnvErrorKind.CRASHED), (3 << 8, EnvErrorKind.CRASHED)])
def test_a_game_process_that_died_is_told_by_how_it_died(wait_status: int, kind: EnvErrorKind):
    """In the EnvHost's own words for a sandboxed game's process (sandboxed_game.py)."""
    described, _ = describe_exit(wait_status, memory_limit_mb=128, cpu_seconds=1.0)
    text = with_traceback_tail(f"EnvHost h:1 Step failed: INTERNAL: Game.step() failed: the game's process {described}",
                               "last output of the game's process:\nallocating...")
    error = EnvError.of(text)
    assert error.kind is kind and error.label == f"{kind} in step"
    assert error.traceback == "last output of the game's process:\nallocating..."


def test_an_envhost_nobody_answers_at_is_unreachable():
    error = EnvError.of(asyncio.run(env_error_of(closed_port(), "math")))
    assert error.kind is EnvErrorKind.ENVHOST_UNREACHABLE and "OpenSession failed: UNAVAILABLE:" in error.message
    assert error.traceback == ""


def test_a_huge_traceback_is_trimmed_to_its_last_lines_and_says_so():
    async def scenario() -> str:
        async with envhost() as address:
            return await env_error_of(address, "explode", action="explode-big")

    text = asyncio.run(scenario())
    error = EnvError.of(text)
    assert len(text) < 6_000 and len(error.message) <= 500
    first, *rest = error.traceback.splitlines()
    assert first.startswith("[the traceback's last ") and "at most 4096 characters]" in first
    assert len(rest) <= 20 and len("\n".join(rest)) <= 4096
    assert rest[-1].endswith("x" * 100)  # its end (where the game raised) is kept


def failing(error: str, group_id: str = "g") -> Trajectory:
    return Trajectory(group_id=group_id, token_ids=[1], loss_mask=[0], sampling_logprobs=[0.0], total_reward=0.0,
                      stop_reason=StopReason.ENV_ERROR, env_error=error)


RAISED = with_traceback_tail(
    "EnvHost 10.0.0.7:50054 Step failed: INTERNAL: Reverse.step() raised KeyError: 'x'",
    'Traceback (most recent call last):\n  File "reverse.py", line 9, in step\n    return self.table[action]\n'
    "KeyError: 'x'")
UNKNOWN = ("EnvHost 10.0.0.7:50054 OpenSession failed: NOT_FOUND: env_name: no environment named 'revers'; "
           "known: gomoku, guess_number, math, math_tool")


def test_the_digest_tells_each_distinct_error_once_with_its_traceback_and_counts_the_rest():
    told: list[tuple[str, str]] = []

    async def tell(level: str, message: str) -> None:
        told.append((level, message))

    async def scenario() -> EnvErrorDigest:
        digest = EnvErrorDigest(tell=tell, max_told=3)
        guesses = [failing(f"EnvHost h:1 Step failed: INTERNAL: Game.step() raised ValueError: guess {n} out of range")
                   for n in (37, 12, 99)]
        await digest.note([failing(RAISED)] * 5 + guesses, what="step 1")
        await digest.note([failing(RAISED), failing(UNKNOWN)], what="step 2")
        await digest.note([failing("the environment did not answer within the episode's time limit (1 s, "
                                   "INTERACTING)")], what="step 3")  # a 4th distinct error: counted only
        return digest

    digest = asyncio.run(scenario())
    assert [level for level, _ in told] == ["error", "error", "error"]
    raised, guess, unknown = (message for _, message in told)
    assert raised.startswith("step 1: an episode failed: the game raised in step: EnvHost 10.0.0.7:50054 Step "
                             "failed: INTERNAL: Reverse.step() raised KeyError: 'x' (the first such error")
    assert raised.endswith("\nTraceback (most recent call last):\n  File \"reverse.py\", line 9, in step\n"
                           "    return self.table[action]\nKeyError: 'x'")
    assert "guess 37 out of range" in guess  # 12 and 99: the same error, other numbers
    assert unknown.startswith("step 2: an episode failed: unknown environment: ")
    summary = digest.summary()
    assert summary.startswith("environment errors in this job, 11 episodes in all: 6 x the game raised in step: ")
    assert "; 3 x the game raised in step: EnvHost h:1" in summary and "; 1 x unknown environment" in summary
    assert summary.endswith("; 1 x other errors") and "\n" not in summary


class FailingRollout(ScriptedRollout):
    """Every training episode fails with `train_error`, every evaluation episode with `eval_error`
    (an empty error: that episode plays normally)."""

    def __init__(self, *, train_error: str = "", eval_error: str = "") -> None:
        super().__init__(learns_at=1)
        self.train_error, self.eval_error = train_error, eval_error

    async def run_episodes(self, requests, group_size, *, evaluation):
        error = self.eval_error if evaluation else self.train_error
        async for trajectory in super().run_episodes(requests, group_size, evaluation=evaluation):
            yield failing(error, trajectory.group_id) if error else trajectory


def rl_ports(rollout: ScriptedRollout) -> RlPorts:
    return RlPorts(trainer=RecordingTrainer(), rollout=rollout, weights=VersionSync(rollout),
                   reporter=RecordingReporter(), stop=asyncio.Event())


def rl_plan(**overrides) -> RlPlan:
    return RlPlan(job_id="j", **{"total_steps": 2, "batch_size": 2, "group_size": 2, "eval_episodes": 2,
                                 "env_outage": QUICK, **overrides})


def environment_lines(ports) -> list[tuple[str, str]]:  # noqa: ANN001
    return [(e[1], e[2]) for e in ports.reporter.events if e[0] == "log:environment"]


def test_a_job_whose_game_raises_in_every_step_fails_naming_the_cause_and_logs_the_traceback_once():
    ports = rl_ports(FailingRollout(train_error=RAISED))
    with pytest.raises(EnvironmentBroken) as failed:
        asyncio.run(run_rl(rl_plan(), ports))
    message = str(failed.value)
    assert message.startswith("step 1: no usable episode with the environment up, 3 times (4 of 4 episodes failed); "
                              "giving up. Cause: the game raised in step: EnvHost 10.0.0.7:50054 Step failed: "
                              "INTERNAL: Reverse.step() raised KeyError: 'x'; the game's traceback is in the job's log")
    assert "Traceback" not in message  # the status names the cause; the traceback is in the log
    lines = environment_lines(ports)
    assert [level for level, _ in lines] == ["error", "warning"]  # told once (of 12 failures), then the summary
    assert "KeyError: 'x' (the first such error of this job" in lines[0][1] and "reverse.py" in lines[0][1]
    assert lines[1][1].startswith("environment errors in this job, 12 episodes in all: 12 x the game raised in step")
    assert ports.trainer.steps == []


@pytest.mark.parametrize("eval_error", [RAISED, UNKNOWN])
def test_an_evaluation_whose_episodes_all_failed_fails_the_job_before_training(eval_error: str):
    ports = rl_ports(FailingRollout(eval_error=eval_error))
    with pytest.raises(EnvironmentBroken, match=r"^the evaluation at step 0: no usable episode with the environment "
                                                r"up, 3 times \(2 of 2 episodes failed\); giving up. Cause: "
                                                f"{EnvError.of(eval_error).label}: "):
        asyncio.run(run_rl(rl_plan(), ports))
    assert ports.trainer.steps == []
    assert not [e for e in ports.reporter.events if e[0] == "metrics"]  # no score, of 0 or any other


def test_a_final_evaluation_that_failed_fails_the_job_after_the_trained_policy_is_saved():
    class BrokenLastEvaluation(FailingRollout):
        async def run_episodes(self, requests, group_size, *, evaluation):
            self.eval_error = RAISED if evaluation and self.version >= 2 else ""
            async for trajectory in super().run_episodes(requests, group_size, evaluation=evaluation):
                yield trajectory

    ports = rl_ports(BrokenLastEvaluation())
    with pytest.raises(EnvironmentBroken, match="the evaluation at step 2: no usable episode"):
        asyncio.run(run_rl(rl_plan(), ports))
    assert ports.trainer.steps == [1, 2] and ports.trainer.checkpoints[-1] == ("final", True)
    assert ("checkpoint", "ckpt-final", 2) in ports.reporter.events


def test_a_partly_failed_evaluation_is_scored_and_its_errors_are_told():
    class HalfBrokenEvaluation(ScriptedRollout):
        async def run_episodes(self, requests, group_size, *, evaluation):
            index = 0
            async for trajectory in super().run_episodes(requests, group_size, evaluation=evaluation):
                yield failing(RAISED, trajectory.group_id) if evaluation and index == 0 else trajectory
                index += 1

    ports = rl_ports(HalfBrokenEvaluation(learns_at=1))
    asyncio.run(run_rl(rl_plan(total_steps=1), ports))
    scored = [e[2] for e in ports.reporter.events if e[0] == "metrics" and "eval/env_errors" in e[2]]
    assert [values["eval/env_errors"] for values in scored] == [1.0, 1.0]
    lines = environment_lines(ports)
    assert [level for level, _ in lines] == ["error", "warning"]
    assert lines[0][1].startswith("the evaluation at step 0: an episode failed: the game raised in step")
    assert "2 episodes in all" in lines[1][1]
    assert ports.reporter.finished[0] is True


class InferenceRollout(FailingRollout):
    async def open(self) -> None: ...


def test_an_inference_job_whose_episodes_all_failed_fails_naming_the_cause(tmp_path):
    reporter = RecordingReporter()
    ports = InferencePorts(rollout=InferenceRollout(eval_error=UNKNOWN), reporter=reporter, stop=asyncio.Event())
    plan = InferencePlan(job_id="j", num_episodes=3, output_path=str(tmp_path / "out.jsonl"))
    with pytest.raises(EnvironmentBroken, match=r"^inference: every episode failed \(3 of 3\). Cause: unknown "
                                                r"environment: .*no environment named 'revers'"):
        asyncio.run(run_inference(plan, ports))
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 3  # the failed episodes are still written
    assert reporter.finished is None
