"""The multi-agent driver over in-process ports: real Agent Protocol, real gomoku, fake policies.

Each fake agent plays its seats through the protocol (join, await turn, submit) with scripted
moves, so matches, barriers, Elo, per-agent metrics and the common checkpoint are the real ones.
"""

from __future__ import annotations

import asyncio
import functools
import random

import pytest

from opentinker_runtime.games.gomoku_game import GomokuGame
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.driver.ma_driver import AgentFailed, AgentPorts, MultiAgentPorts, run_multi_agent
from opentinker_coordinator.driver.pairings import Pairing
from opentinker_coordinator.protocol.protocol_errors import ProtocolError
from opentinker_coordinator.driver.plans import AgentPlan, MultiAgentPlan, MultiAgentResume
from opentinker_coordinator.protocol.seated_environment import MatchEnvironmentRef
from opentinker_coordinator.types import CheckpointRef, StopReason, Trajectory
from tests.coordinator.fakes import RecordingTrainer
from tests.coordinator.seated_games import factory_of

CELLS = [f"{c}{r}" for c in "abc" for r in (1, 2, 3)]


def in_event_loop(test):
    """Run an async test function in a fresh event loop (pytest sees a plain function)."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))
    return run


class ProtocolAgent:
    """A Rollout stand-in: plays each seat through the protocol; one token per action."""

    def __init__(self, host: AgentProtocol, agent_id: str, *, invalid_rate: float, seed: int,
                 log: list, fail_at_step: int | None = None) -> None:
        self.host, self.agent_id, self.invalid_rate = host, agent_id, invalid_rate
        self.rng, self.log, self.fail_at_step = random.Random(seed), log, fail_at_step
        self.version, self.calls = 0, 0

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def play_seats(self, seats, *, evaluation):
        self.calls += 1
        step = self.calls - 1
        self.log.append(("start", "ROLLOUT", self.agent_id, step))
        if self.fail_at_step == step:
            raise ConnectionError("rollout worker died")
        results = await asyncio.gather(*(self._play(seat) for seat in seats))
        self.log.append(("end", "ROLLOUT", self.agent_id, step))
        for trajectory in results:
            yield trajectory

    async def _play(self, seat) -> Trajectory:
        """Like the Rollout: a broken match ends this episode as an environment error."""
        try:
            return await self._play_match(seat)
        except ProtocolError as error:
            return Trajectory(group_id=seat.group_id, token_ids=[0], loss_mask=[0], sampling_logprobs=[0.0],
                              total_reward=0.0, stop_reason=StopReason.ENV_ERROR, prompt_text=str(error))

    async def _play_match(self, seat) -> Trajectory:
        self.host.join(seat.match_id, self.agent_id, seat.seat)
        total, tokens, mask = 0.0, [0], [0]
        while True:
            turn = await self.host.await_turn(seat.match_id, self.agent_id)
            total += turn.reward
            if turn.finished:
                break
            await asyncio.sleep(self.rng.random() * 0.002)
            move = "??" if self.rng.random() < self.invalid_rate else self.rng.choice(CELLS)
            result = await self.host.submit(seat.match_id, self.agent_id, turn.turn_index, move)
            total += result.reward
            tokens += [1, 0]
            mask += [1, 0]
            if result.finished:
                break
        return Trajectory(group_id=seat.group_id, token_ids=tokens, loss_mask=mask,
                          sampling_logprobs=[-0.5 * m for m in mask], total_reward=total,
                          stop_reason=StopReason.DONE, agent_id=self.agent_id, match_id=seat.match_id,
                          seat=seat.seat)

    async def evaluate_alone(self, requests):
        for request in requests:
            yield Trajectory(group_id=request.group_id, token_ids=[0, 1], loss_mask=[0, 1],
                             sampling_logprobs=[0.0, -1.0], total_reward=1.0, stop_reason=StopReason.DONE,
                             correct=True)


class LoggingTrainer(RecordingTrainer):
    def __init__(self, agent_id: str, log: list) -> None:
        super().__init__()
        self.agent_id, self.log = agent_id, log

    async def forward_backward(self, datums):
        self.log.append(("start", "UPDATE", self.agent_id, len(self.steps)))
        await asyncio.sleep(random.random() * 0.005)
        return await super().forward_backward(datums)

    async def optim_step(self, step):
        result = await super().optim_step(step)
        self.log.append(("end", "UPDATE", self.agent_id, step - 1))
        return result

    async def save_checkpoint(self, name, *, final):
        self.checkpoints.append((name, final))
        return CheckpointRef(checkpoint_id=f"{self.agent_id}-{name}", step=len(self.steps))


class Sync:
    def __init__(self, agent: ProtocolAgent) -> None:
        self.agent = agent

    async def sync(self) -> int:
        self.agent.version += 1
        return self.agent.version


class Reporter:
    def __init__(self) -> None:
        self.reported, self.checkpoints, self.logs, self.finished = [], [], [], None
        self.environment_logs: list[tuple[str, str]] = []
        self.samples_seen: list[tuple] = []

    async def metrics(self, step, values, *, agent_id=""):
        self.reported.append((step, agent_id, dict(values)))

    async def progress(self, *, phase, step, total_steps):
        pass

    async def log(self, level, message, *, source="coordinator"):
        if source == "coordinator":
            self.logs.append((level, message))
        else:
            self.environment_logs.append((level, message))

    async def checkpoint(self, ref, *, agents=None, driver_state=None):
        self.checkpoints.append((ref.step, dict(agents or {}), dict(driver_state or {})))

    async def samples(self, step, split, trajectories, *, agent_id=""):
        self.samples_seen.append((step, split, agent_id, len(trajectories)))

    async def finish(self, *, succeeded, message):
        self.finished = (succeeded, message)


def plan(agents, *, steps=3, pairing=Pairing.AUTO, resume=None, checkpoint_every=1, group_size=3):
    return MultiAgentPlan(
        job_id="job", scope="job/attempt-1", agents=tuple(agents),
        environment=MatchEnvironmentRef(env_name="gomoku", config={"size": 3, "win_length": 3, "opponent": "none"}),
        pairing=pairing, total_steps=steps, batch_size=1, group_size=group_size, checkpoint_every_steps=checkpoint_every,
        evaluates_alone=True, eval_episodes=2, barrier_timeout_s=30, resume=resume, seed=5)


def build(agent_ids, *, frozen=(), fail=None):
    host = AgentProtocol(factory_of(lambda config: GomokuGame(**config)))
    log: list = []
    fakes, ports = {}, {}
    for index, agent_id in enumerate(agent_ids):
        fake = ProtocolAgent(host, agent_id, invalid_rate=0.2, seed=index, log=log,
                             fail_at_step=fail[1] if fail and fail[0] == agent_id else None)
        fakes[agent_id] = fake
        if agent_id in frozen:
            ports[agent_id] = AgentPorts(rollout=fake)
        else:
            ports[agent_id] = AgentPorts(rollout=fake, trainer=LoggingTrainer(agent_id, log), weights=Sync(fake))
    reporter = Reporter()
    return host, log, fakes, MultiAgentPorts(agents=ports, host=host, reporter=reporter, stop=asyncio.Event())


def merged(reported) -> dict:
    """(step, agent) -> every value reported for it."""
    values: dict = {}
    for step, agent, reported_values in reported:
        values.setdefault((step, agent), {}).update(reported_values)
    return values


def assert_barriers_held(log, agent_ids, steps):
    """No agent starts UPDATE k before all ended ROLLOUT k, nor ROLLOUT k+1 before all ended UPDATE k."""
    position = {event: index for index, event in enumerate(log)}
    for step in range(steps):
        last_rollout_end = max(position[("end", "ROLLOUT", a, step)] for a in agent_ids)
        for agent in agent_ids:
            if ("start", "UPDATE", agent, step) in position:
                assert position[("start", "UPDATE", agent, step)] > last_rollout_end
        ends = [position[("end", "UPDATE", a, step)] for a in agent_ids if ("end", "UPDATE", a, step) in position]
        if step + 1 < steps and ends:
            for agent in agent_ids:
                assert position[("start", "ROLLOUT", agent, step + 1)] > max(ends)


@in_event_loop
async def test_two_learning_agents_play_train_and_checkpoint_in_lockstep():
    host, log, fakes, ports = build(["black_agent", "white_agent"])
    agents = [AgentPlan(agent_id="black_agent"), AgentPlan(agent_id="white_agent")]
    await run_multi_agent(plan(agents), ports)
    reporter = ports.reporter
    assert reporter.finished[0] is True
    assert_barriers_held(log, ["black_agent", "white_agent"], 3)
    per_agent = merged(reporter.reported)
    for step in (1, 2, 3):
        black, white = per_agent[(step, "black_agent")], per_agent[(step, "white_agent")]
        assert black["match/games"] == white["match/games"] == 3
        assert black["match/win_rate"] == pytest.approx(white["match/loss_rate"])
        assert black["elo"] + white["elo"] == pytest.approx(2000.0)
        assert black["match/win_rate/black"] == black["match/win_rate"]
        assert 0.0 <= black["match/invalid_move_rate"] <= 1.0
        assert black["policy_version"] == step
    # the common checkpoint of every step names both agents and their Elo
    assert [c[0] for c in reporter.checkpoints] == [1, 2, 3, 3]
    step_1 = reporter.checkpoints[0]
    assert step_1[1] == {"black_agent": "black_agent-step-1-black_agent", "white_agent": "white_agent-step-1-white_agent"}
    assert set(step_1[2]) == {"elo/black_agent", "elo/white_agent"}
    assert not host.matches and "job/attempt-1" not in host.jobs  # forgotten at the end


@in_event_loop
async def test_three_agents_round_robin_every_ordered_pair_plays_each_step():
    ids = ["a", "b", "c"]
    host, log, fakes, ports = build(ids, frozen=("c",))
    agents = [AgentPlan(agent_id="a"), AgentPlan(agent_id="b"), AgentPlan(agent_id="c", learns=False)]
    await run_multi_agent(plan(agents, steps=2, group_size=1), ports)
    per_agent = merged(ports.reporter.reported)
    for agent in ids:
        # 6 ordered pairings of 3 agents over 2 seats, each agent in 4 of them, in both colours
        assert per_agent[(1, agent)]["match/games"] == 4
        assert {"match/win_rate/black", "match/win_rate/white"} <= set(per_agent[(1, agent)])
    assert sum(per_agent[(2, a)]["elo"] for a in ids) == pytest.approx(3000.0)
    for agent, opponent in (("a", "b"), ("a", "c"), ("b", "c")):
        mine, theirs = per_agent[(1, agent)], per_agent[(1, opponent)]
        assert mine[f"match/vs/{opponent}/games"] == theirs[f"match/vs/{agent}/games"] == 2
        # zero-sum: a's wins against b are b's losses against a
        assert (mine[f"match/vs/{opponent}/win_rate"] + theirs[f"match/vs/{agent}/win_rate"]
                + mine[f"match/vs/{opponent}/draw_rate"]) == pytest.approx(1.0)
    assert "loss" not in per_agent[(1, "c")]  # frozen: never updated
    assert set(ports.reporter.checkpoints[0][1]) == {"a", "b"}
    assert_barriers_held(log, ids, 2)


@in_event_loop
async def test_a_failing_agent_breaks_the_barriers_and_nobody_deadlocks():
    host, log, fakes, ports = build(["x", "y"], fail=("y", 1))
    agents = [AgentPlan(agent_id="x"), AgentPlan(agent_id="y")]
    with pytest.raises(AgentFailed) as failed:
        async with asyncio.timeout(20):
            await run_multi_agent(plan(agents, steps=3), ports)
    assert failed.value.agent_id == "y"
    assert isinstance(failed.value.cause, ConnectionError)
    # x got no further than step 1's rollout: it never updated for step 1
    assert ("start", "UPDATE", "x", 1) not in log
    assert [c[0] for c in ports.reporter.checkpoints] == [1]


@in_event_loop
async def test_resume_restores_every_learner_and_the_elo_ratings():
    host, log, fakes, ports = build(["p", "q"])
    agents = [AgentPlan(agent_id="p"), AgentPlan(agent_id="q")]
    resume = MultiAgentResume(step=2, checkpoint_ids={"p": "p-ckpt", "q": "q-ckpt"},
                              ratings={"elo/p": 1030.0, "elo/q": 970.0})
    await run_multi_agent(plan(agents, steps=3, resume=resume), ports)
    assert ports.agents["p"].trainer.loaded == ["p-ckpt"] and ports.agents["q"].trainer.loaded == ["q-ckpt"]
    steps = sorted({step for step, _, values in ports.reporter.reported if "match/games" in values})
    assert steps == [3]
    elo = {agent: values["elo"] for step, agent, values in ports.reporter.reported if step == 3 and "elo" in values}
    assert elo["p"] + elo["q"] == pytest.approx(2000.0) and elo["p"] != 1000.0


@in_event_loop
async def test_a_stop_request_ends_every_pipeline():
    host, log, fakes, ports = build(["s", "t"])
    agents = [AgentPlan(agent_id="s"), AgentPlan(agent_id="t")]
    original = ports.reporter.metrics

    async def stop_after_first(step, values, *, agent_id=""):
        await original(step, values, agent_id=agent_id)
        ports.stop.set()

    ports.reporter.metrics = stop_after_first
    from opentinker_coordinator.driver.rl_driver import StopRequested
    with pytest.raises(StopRequested):
        async with asyncio.timeout(20):
            await run_multi_agent(plan(agents, steps=5, checkpoint_every=0), ports)
    assert max(step for step, _, _ in ports.reporter.reported) <= 2
