"""Riding out an EnvHost outage: a batch or evaluation whose episodes failed because the EnvHost
was unreachable is collected again within the Coordinator's outage budget (each wait an event),
a broken game still fails fast, and an evaluation that stays unusable fails the job (never a
score, nor an evaluation skipped in silence)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from opentinker_api.common.v1 import trajectory_pb2
from opentinker_runtime.games.gomoku_game import GomokuGame
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.driver.env_outages import EnvironmentBroken, EnvironmentUnavailable, OutageBudget
from opentinker_coordinator.protocol.local_seated import local_environments
from opentinker_coordinator.driver.ma_driver import AgentFailed, AgentPorts, MultiAgentPorts, evaluate_alone, run_multi_agent
from opentinker_coordinator.driver.pairings import Pairing
from opentinker_coordinator.driver.plans import AgentPlan, MultiAgentPlan, RlPlan
from opentinker_coordinator.adapters.remote import trajectory_from_message
from opentinker_coordinator.driver.rl_driver import RlPorts, StopRequested, run_rl
from opentinker_coordinator.protocol.seated_environment import EnvironmentBroke, MatchEnvironmentRef
from opentinker_coordinator.types import StopReason, Trajectory
from tests.coordinator._multi_agent import LoggingTrainer, ProtocolAgent, Reporter, Sync
from tests.coordinator._multi_agent import plan as league_plan
from tests.coordinator.fakes import RecordingReporter, RecordingTrainer, ScriptedRollout, VersionSync

ENVHOST = "10.0.0.7:50054"
UNREACHABLE = f"EnvHost {ENVHOST} OpenSession failed: UNAVAILABLE: failed to connect to all addresses"
GAME_RAISED = f"EnvHost {ENVHOST} Step failed: INTERNAL: ZeroDivisionError: division by zero"
QUICK = OutageBudget(seconds=5.0, initial_delay=0.01, max_delay=0.02, broken_game_delay=0.01)


def failed(group_id: str, error: str) -> Trajectory:
    return Trajectory(group_id=group_id, token_ids=[1], loss_mask=[0], sampling_logprobs=[0.0], total_reward=0.0,
                      stop_reason=StopReason.ENV_ERROR, env_error=error, env_unreachable=": UNAVAILABLE:" in error)


class FlakyEnvRollout(ScriptedRollout):
    """A Rollout whose EnvHost fails the first `train_failures` training collections and the first
    `eval_failures` evaluations with `error` (every episode, or the first `eval_failing` of an eval)."""

    def __init__(self, *, train_failures: int = 0, eval_failures: int = 0, error: str = UNREACHABLE,
                 eval_failing: int | None = None) -> None:
        super().__init__(learns_at=1)
        self.train_failures, self.eval_failures, self.error = train_failures, eval_failures, error
        self.eval_failing = eval_failing

    async def run_episodes(self, requests, group_size, *, evaluation):
        left = self.eval_failures if evaluation else self.train_failures
        if left > 0:
            if evaluation:
                self.eval_failures -= 1
            else:
                self.train_failures -= 1
        index = 0
        async for trajectory in super().run_episodes(requests, group_size, evaluation=evaluation):
            limit = self.eval_failing if evaluation and self.eval_failing is not None else len(requests) * group_size
            yield failed(trajectory.group_id, self.error) if left > 0 and index < limit else trajectory
            index += 1


def ports_for(rollout: ScriptedRollout, stop: asyncio.Event | None = None) -> RlPorts:
    return RlPorts(trainer=RecordingTrainer(), rollout=rollout, weights=VersionSync(rollout),
                   reporter=RecordingReporter(), stop=stop or asyncio.Event())


def plan(budget: OutageBudget = QUICK, **overrides) -> RlPlan:
    return RlPlan(job_id="j", total_steps=2, batch_size=1, group_size=2, eval_episodes=2, env_outage=budget,
                  **overrides)


def logs(ports: RlPorts, level: str) -> list[str]:
    return [e[2] for e in ports.reporter.events if e[0] == "log" and e[1] == level]


def metrics_at(ports: RlPorts, step: int) -> list[dict]:
    return [e[2] for e in ports.reporter.events if e[0] == "metrics" and e[1] == step]


def test_an_outage_longer_than_three_collections_is_waited_out_and_every_step_taken_once():
    ports = ports_for(FlakyEnvRollout(train_failures=8))
    asyncio.run(run_rl(plan(), ports))
    assert ports.trainer.steps == [1, 2]
    assert [len(b) for b in ports.trainer.batches] == [2, 2]
    waits = logs(ports, "warning")
    assert len(waits) == 8 and all("step 1: environment unavailable (2 of 2 episodes failed: EnvHost "
                                   f"{ENVHOST} OpenSession failed: UNAVAILABLE" in w for w in waits), waits
    assert all("of the outage budget left)" in w for w in waits)
    assert any(m.startswith("step 1: environment back; collected after 8 retries") for m in logs(ports, "info"))
    step_1 = next(m for m in metrics_at(ports, 1) if "reward/mean" in m)
    assert step_1["env_errors"] == 16 and step_1["rollout_retries"] == 8
    assert ports.reporter.finished[0] is True


def test_an_outage_past_the_budget_fails_the_step_naming_the_envhost_and_takes_no_optimizer_step():
    ports = ports_for(FlakyEnvRollout(train_failures=10_000))
    started = time.monotonic()
    budget = OutageBudget(seconds=0.3, initial_delay=0.02, max_delay=0.05)
    expected = f"step 1: the environment stayed unavailable for 0.3 s .*{ENVHOST}"
    with pytest.raises(EnvironmentUnavailable, match=expected):
        asyncio.run(run_rl(plan(budget), ports))
    assert 0.3 <= time.monotonic() - started < 2.0
    assert ports.trainer.steps == []


def test_a_broken_game_fails_after_three_collections_without_waiting_for_the_outage_budget():
    ports = ports_for(FlakyEnvRollout(train_failures=10_000, error=GAME_RAISED))
    started = time.monotonic()
    budget = OutageBudget(seconds=300.0, broken_game_delay=0.01)
    with pytest.raises(EnvironmentBroken, match="step 1: no usable episode with the environment up, 3 times"):
        asyncio.run(run_rl(plan(budget), ports))
    assert time.monotonic() - started < 2.0
    assert ports.trainer.steps == []


def test_an_evaluation_during_an_outage_is_collected_again_and_only_the_good_one_is_scored():
    ports = ports_for(FlakyEnvRollout(eval_failures=3))
    asyncio.run(run_rl(plan(), ports))
    initial = metrics_at(ports, 0)
    assert len(initial) == 1 and initial[0]["eval/env_errors"] == 0 and initial[0]["eval/episodes"] == 2
    assert sum("the evaluation at step 0: environment unavailable" in w for w in logs(ports, "warning")) == 3


def test_an_evaluation_partly_lost_to_an_outage_is_not_scored_but_collected_again():
    ports = ports_for(FlakyEnvRollout(eval_failures=1, eval_failing=1))
    asyncio.run(run_rl(plan(), ports))
    assert [m["eval/env_errors"] for m in metrics_at(ports, 0)] == [0.0]
    assert any("the evaluation at step 0: environment unavailable (1 of 2 episodes failed" in w
               for w in logs(ports, "warning"))


def test_an_evaluation_that_stays_unavailable_fails_the_job_naming_the_outage_before_any_step():
    budget = OutageBudget(seconds=0.2, initial_delay=0.02, max_delay=0.05)
    ports = ports_for(FlakyEnvRollout(eval_failures=10_000))
    with pytest.raises(EnvironmentUnavailable, match=r"the evaluation at step 0: the environment stayed unavailable "
                                                     r"for 0.2 s .*Cause: EnvHost unreachable: EnvHost 10.0.0.7:50054 "
                                                     r"OpenSession failed: UNAVAILABLE"):
        asyncio.run(run_rl(plan(budget, eval_every_steps=1), ports))
    assert ports.trainer.steps == []
    scored = [e for e in ports.reporter.events if e[0] == "metrics" and any(k.startswith("eval/") for k in e[2])]
    assert scored == []  # never "eval/reward/mean 0" for an evaluation that did not happen
    assert ports.reporter.finished is None  # the launcher reports the failure


def test_a_stop_during_an_outage_wait_ends_the_run_at_once():
    async def scenario() -> float:
        stop = asyncio.Event()
        ports = ports_for(FlakyEnvRollout(train_failures=10_000), stop)
        budget = OutageBudget(seconds=300.0, initial_delay=30.0, max_delay=30.0)
        run = asyncio.ensure_future(run_rl(plan(budget), ports))
        await asyncio.sleep(0.2)
        started = time.monotonic()
        stop.set()
        with pytest.raises(StopRequested):
            await run
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 1.0


@pytest.mark.parametrize(("code", "unreachable"), [("UNAVAILABLE", True), ("INTERNAL", False),
                                                   ("DEADLINE_EXCEEDED", False), ("NOT_FOUND", False)])
def test_the_rollouts_env_error_tells_an_unreachable_envhost_from_a_failing_game(code: str, unreachable: bool):
    message = trajectory_pb2.Trajectory(stop_reason=trajectory_pb2.STOP_REASON_ENV_ERROR,
                                        env_error=f"EnvHost {ENVHOST} Reset failed: {code}: details")
    trajectory = trajectory_from_message(message)
    assert trajectory.failed and trajectory.env_unreachable is unreachable
    assert trajectory.env_error == message.env_error


class EvalOnlyRollout:
    def __init__(self, failures: int) -> None:
        self.inner = FlakyEnvRollout(eval_failures=failures)

    def evaluate_alone(self, requests):
        return self.inner.run_episodes(requests, 1, evaluation=True)


def multi_agent_plan(budget: OutageBudget) -> MultiAgentPlan:
    return MultiAgentPlan(job_id="j", scope="j/attempt-1", agents=(AgentPlan(agent_id="a"),),
                          environment=MatchEnvironmentRef(env_name="gomoku"), pairing=Pairing.ROUND_ROBIN,
                          total_steps=1, batch_size=1, group_size=1, eval_episodes=2, evaluates_alone=True,
                          env_outage=budget)


@pytest.mark.parametrize(("failures", "scored"), [(3, True), (10_000, False)])
def test_a_multi_agent_evaluation_rides_out_an_outage_like_a_single_agent_one(failures: int, scored: bool):
    reporter = RecordingReporter()
    ports = MultiAgentPorts(agents={"a": AgentPorts(rollout=EvalOnlyRollout(failures))}, host=None,
                            reporter=reporter, stop=asyncio.Event())
    budget = OutageBudget(seconds=0.3, initial_delay=0.01, max_delay=0.02)
    if scored:
        metrics = asyncio.run(evaluate_alone(multi_agent_plan(budget), ports, "a", 4))
        assert metrics["eval/env_errors"] == 0
        return
    with pytest.raises(EnvironmentUnavailable, match="agent 'a''s evaluation at step 4: the environment stayed "
                                                     "unavailable for 0.3 s"):
        asyncio.run(evaluate_alone(multi_agent_plan(budget), ports, "a", 4))


def flaky_gomoku(failing_starts: range):
    """Seated gomoku whose n-th start (0 = the seats query) fails as an unreachable EnvHost
    while n is in `failing_starts`."""
    make = local_environments(lambda config: GomokuGame(**config))
    starts = iter(range(1_000_000))

    def factory(environment, job_id):
        env = make(environment, job_id)
        if next(starts) in failing_starts:
            async def unreachable_start(reset_kwargs, seed):
                raise EnvironmentBroke(f"EnvHost OpenSession failed: UNAVAILABLE: connection refused ({ENVHOST})",
                                       unreachable=True)
            env.start = unreachable_start
        return env
    return factory


def run_league(failing_starts: range, budget: OutageBudget):
    host = AgentProtocol(flaky_gomoku(failing_starts))
    log: list = []
    ports = {}
    for index, agent_id in enumerate(("black_agent", "white_agent")):
        fake = ProtocolAgent(host, agent_id, invalid_rate=0.2, seed=index, log=log)
        ports[agent_id] = AgentPorts(rollout=fake, trainer=LoggingTrainer(agent_id, log), weights=Sync(fake))
    multi = MultiAgentPorts(agents=ports, host=host, reporter=Reporter(), stop=asyncio.Event())
    agents = [AgentPlan(agent_id="black_agent"), AgentPlan(agent_id="white_agent")]
    asyncio.run(run_multi_agent(dataclasses.replace(league_plan(agents, steps=2), env_outage=budget), multi))
    return multi


def test_multi_agent_matches_that_cannot_open_for_an_outage_are_opened_again_and_every_step_taken_once():
    # starts 1-3 are step 1's three matches, 4: one of them again (two opened the second time)
    ports = run_league(range(1, 5), QUICK)
    assert ports.reporter.finished[0] is True
    assert all(own.trainer.steps == [1, 2] for own in ports.agents.values())
    waits = [m for level, m in ports.reporter.logs if level == "warning"]
    assert len(waits) == 2 and all(m.startswith("step 1's matches: environment unavailable") for m in waits), waits
    assert any(m.startswith("step 1's matches: environment back after 2 retries") for _, m in ports.reporter.logs)


def test_multi_agent_matches_unreachable_past_the_budget_fail_the_job_naming_the_outage():
    with pytest.raises(AgentFailed, match="EnvironmentUnavailable: step 1's matches: the environment stayed "
                                          "unavailable for 0.2 s"):
        run_league(range(1, 1_000_000), OutageBudget(seconds=0.2, initial_delay=0.02, max_delay=0.05))
