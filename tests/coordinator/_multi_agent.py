"""The multi-agent driver's test kit (test_ma_driver.py, test_ma_async.py, test_env_outages.py):
fake agents that play their seats through the real Agent Protocol, a trainer that logs its
phases, plans, and the driver's ports built in process."""

from __future__ import annotations

import asyncio
import functools
import random

from opentinker_runtime.games.gomoku_game import GomokuGame
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.driver.ma_driver import AgentPorts, MultiAgentPorts
from opentinker_coordinator.driver.pairings import Pairing
from opentinker_coordinator.protocol.protocol_errors import ProtocolError
from opentinker_coordinator.driver.plans import MultiAgentPlan
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
