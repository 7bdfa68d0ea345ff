"""The multi-agent driver over in-process ports: real Agent Protocol, real gomoku, fake policies.

Each fake agent plays its seats through the protocol (join, await turn, submit) with scripted
moves, so matches, barriers, Elo, per-agent metrics and the common checkpoint are the real ones.
"""

from __future__ import annotations

import asyncio

import pytest

from opentinker_coordinator.driver.ma_driver import AgentFailed, run_multi_agent
from opentinker_coordinator.driver.plans import AgentPlan, MultiAgentResume
from tests.coordinator._multi_agent import build, in_event_loop, merged, plan


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
