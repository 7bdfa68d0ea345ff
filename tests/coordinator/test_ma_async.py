"""Two agents on the one pipeline, asynchronously: the barriers give way to the staleness bound."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from opentinker_coordinator.driver.ma_driver import run_multi_agent
from opentinker_coordinator.driver.plans import AgentPlan
from opentinker_coordinator.driver.staleness import AsyncSettings
from tests.coordinator._multi_agent import LoggingTrainer, ProtocolAgent, build, in_event_loop, merged, plan

RUN_AHEAD_WAIT_S = 2.0


class VersionedAgent(ProtocolAgent):
    """Stamps each episode with the policy version it started on, as the Rollout does."""

    async def _play(self, seat):
        version = self.version
        trajectory = await super()._play(seat)
        return dataclasses.replace(trajectory, policy_version=version)


class SlowUpdateTrainer(LoggingTrainer):
    """An update that lasts until the agent's next rollout has started (at most
    RUN_AHEAD_WAIT_S), so whether the pipeline runs ahead does not hang on timing luck: if it
    cannot, the wait runs out and the test's run-ahead assertion fails."""

    def __init__(self, agent_id: str, log: list, last_step: int) -> None:
        super().__init__(agent_id, log)
        self.last_step = last_step

    async def forward_backward(self, datums):
        step = len(self.steps)
        if step + 1 < self.last_step:
            next_rollout = ("start", "ROLLOUT", self.agent_id, step + 1)
            deadline = asyncio.get_running_loop().time() + RUN_AHEAD_WAIT_S
            while next_rollout not in self.log and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.005)
        return await super().forward_backward(datums)


@pytest.mark.parametrize("finish_on_old_weights", [True, False], ids=["finish-on-old", "swap"])
@in_event_loop
async def test_two_agents_run_ahead_by_at_most_k_steps_and_every_step_is_trained_once(finish_on_old_weights):
    ids = ["black_agent", "white_agent"]
    host, log, fakes, ports = build(ids)
    for agent_id, own in ports.agents.items():
        versioned = VersionedAgent(host, agent_id, invalid_rate=0.2, seed=ids.index(agent_id), log=log)
        own.rollout, own.weights.agent = versioned, versioned
        own.trainer = SlowUpdateTrainer(agent_id, log, last_step=4)
    asynchrony = AsyncSettings(max_staleness=1, finish_on_old_weights=finish_on_old_weights)
    job = dataclasses.replace(plan([AgentPlan(agent_id=a) for a in ids], steps=4), asynchrony=asynchrony)
    async with asyncio.timeout(30):
        await run_multi_agent(job, ports)
    assert ports.reporter.finished[0] is True
    per_agent = merged(ports.reporter.reported)
    for agent_id in ids:
        assert ports.agents[agent_id].trainer.steps == [1, 2, 3, 4]
        for step in (1, 2, 3, 4):
            values = per_agent[(step, agent_id)]
            assert values["match/games"] == 3 and values["async/staleness_max"] <= 1
    for step in (1, 2, 3, 4):
        assert per_agent[(step, ids[0])]["elo"] + per_agent[(step, ids[1])]["elo"] == pytest.approx(2000.0)
    assert [c[0] for c in ports.reporter.checkpoints] == [1, 2, 3, 4, 4]
    assert all("async/rollout_cursor" in c[2] for c in ports.reporter.checkpoints[:4])
    # the barriers are gone: some agent played step s+1 before it finished updating for step s
    position = {event: index for index, event in enumerate(log)}
    ahead = [(a, s) for a in ids for s in range(3)
             if position[("start", "ROLLOUT", a, s + 1)] < position[("end", "UPDATE", a, s)]]
    assert ahead, log
    # and never more than k = 1 ahead: step s+2 waits for the weights of step s+1
    for agent_id in ids:
        for step in range(2):
            assert position[("start", "ROLLOUT", agent_id, step + 2)] > position[("end", "UPDATE", agent_id, step)]
    assert not host.matches
