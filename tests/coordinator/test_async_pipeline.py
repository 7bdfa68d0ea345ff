"""The agent pipeline with max_staleness k: overlap, the staleness bound, exact steps and prompts.

In-process fakes with random phase timings (no grpc): the rollout stamps each episode with the
policy version it started on (as the Rollout does with the version of an episode's oldest
turn) and writes that version into the episode's first token, so the trainer can tell, for
every datum it is given, which weights sampled it.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from opentinker_coordinator.driver import episodes
from opentinker_coordinator.driver.plans import RlPlan
from opentinker_coordinator.driver.rl_driver import RlPorts, run_rl
from opentinker_coordinator.driver.staleness import AsyncSettings, PolicyClock, split_stale
from opentinker_coordinator.types import CheckpointRef, StopReason, Trajectory
from tests.coordinator.fakes import RecordingReporter


class Timeline:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def add(self, *event) -> None:
        self.events.append(event)

    def index(self, *event) -> int:
        return self.events.index(event)


class TimedRollout:
    """Episodes after a random delay; each carries the version it started on (token 0)."""

    def __init__(self, rng: random.Random, timeline: Timeline, *, delay: float, lag_every: int = 0) -> None:
        self.rng, self.timeline, self.delay = rng, timeline, delay
        self.version, self.batches, self.lag_every, self.played = 0, 0, lag_every, 0

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def run_episodes(self, requests, group_size, *, evaluation):
        if evaluation:
            for request in requests:
                yield _trajectory(request.group_id, self.version, reward=1.0)
            return
        batch = self.batches
        self.batches += 1
        self.timeline.add("rollout_start", requests[0].group_id)
        for request in requests:
            for _ in range(group_size):
                version = self.version
                await asyncio.sleep(self.rng.random() * self.delay)
                self.played += 1
                if self.lag_every and self.played % self.lag_every == 0:
                    version = -1  # weights this job never pushed (e.g. a restarted Rollout's base)
                yield _trajectory(request.group_id, version, reward=float(self.rng.random() < 0.5))
        self.timeline.add("rollout_end", requests[0].group_id, batch)


def _trajectory(group_id: str, version: int, *, reward: float) -> Trajectory:
    return Trajectory(group_id=group_id, token_ids=[version + 1000, 5, 6], loss_mask=[0, 1, 1],
                      sampling_logprobs=[0.0, -1.0, -1.0], total_reward=reward, stop_reason=StopReason.DONE,
                      policy_version=version, correct=reward == 1.0)


class TimedTrainer:
    def __init__(self, rng: random.Random, timeline: Timeline, *, delay: float) -> None:
        self.rng, self.timeline, self.delay = rng, timeline, delay
        self.steps: list[int] = []
        self.batches: dict[int, list] = {}
        self.loaded: list[str] = []
        self.pending: list = []

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def forward_backward(self, datums):
        self.pending = list(datums)
        await asyncio.sleep(self.rng.random() * self.delay)
        return {"loss": 1.0}

    async def optim_step(self, step):
        await asyncio.sleep(self.rng.random() * self.delay)
        self.batches[step] = self.pending
        self.steps.append(step)
        self.timeline.add("optim_end", step)
        return {"grad_norm": 0.1}

    async def save_checkpoint(self, name, *, final):
        return CheckpointRef(checkpoint_id=f"ckpt-{name}", step=len(self.steps))

    async def load_checkpoint(self, checkpoint_id):
        self.loaded.append(checkpoint_id)


class TimedSync:
    """Pushes the trainer's weights; remembers how many optimizer steps each version holds."""

    def __init__(self, rng: random.Random, rollout: TimedRollout, trainer: TimedTrainer, *, delay: float,
                 resumed_steps: int = 0) -> None:
        self.rng, self.rollout, self.trainer, self.delay = rng, rollout, trainer, delay
        self.steps_of_version = {0: 0}
        self.resumed_steps = resumed_steps

    async def sync(self) -> int:
        steps = self.resumed_steps + len(self.trainer.steps)
        await asyncio.sleep(self.rng.random() * self.delay)
        self.rollout.version += 1
        self.steps_of_version[self.rollout.version] = steps
        self.rollout.timeline.add("synced", self.rollout.version, steps)
        return self.rollout.version


class CursorReporter(RecordingReporter):
    async def checkpoint(self, ref, *, driver_state=None):
        self.events.append(("checkpoint", ref.checkpoint_id, ref.step, dict(driver_state or {})))


def build(seed: int, *, rollout_delay=0.004, trainer_delay=0.004, sync_delay=0.002, lag_every=0, resumed_steps=0):
    timeline = Timeline()  # each part its own random stream: the rollout's draws never depend on the others'
    rollout = TimedRollout(random.Random(seed), timeline, delay=rollout_delay, lag_every=lag_every)
    trainer = TimedTrainer(random.Random(seed + 1000), timeline, delay=trainer_delay)
    sync = TimedSync(random.Random(seed + 2000), rollout, trainer, delay=sync_delay, resumed_steps=resumed_steps)
    ports = RlPorts(trainer=trainer, rollout=rollout, weights=sync, reporter=CursorReporter(), stop=asyncio.Event())
    return ports, timeline


def rl_plan(k: int, *, finish_on_old_weights: bool, steps: int = 5, resume=None, seed: int = 3) -> RlPlan:
    return RlPlan(job_id="j", total_steps=steps, batch_size=2, group_size=3, eval_episodes=2, seed=seed,
                  checkpoint_every_steps=2, resume=resume,
                  asynchrony=AsyncSettings(max_staleness=k, finish_on_old_weights=finish_on_old_weights))


def trained_staleness(ports: RlPorts) -> dict[int, list[int]]:
    """Per optimizer step (1-based), how stale each trained datum was (its version's steps)."""
    sync: TimedSync = ports.weights
    ages = {}
    for step, datums in ports.trainer.batches.items():
        versions = [datum.tokens[0] - 1000 for datum in datums]
        ages[step] = [(step - 1) - sync.steps_of_version[v] for v in versions]
    return ages


def step_metrics(ports: RlPorts) -> dict[int, dict]:
    return {e[1]: e[2] for e in ports.reporter.events if e[0] == "metrics" and "reward/mean" in e[2]}


@pytest.mark.parametrize("finish_on_old_weights", [True, False], ids=["finish-on-old", "swap"])
@pytest.mark.parametrize("k", [0, 1, 2])
def test_no_trained_token_is_older_than_k_versions_under_random_phase_timings(k, finish_on_old_weights):
    for seed in range(8):
        rng = random.Random(seed)
        ports, _ = build(seed, rollout_delay=rng.choice([0.001, 0.004, 0.01]),
                         trainer_delay=rng.choice([0.001, 0.004, 0.01]), sync_delay=rng.choice([0.0, 0.003]))
        plan = rl_plan(k, finish_on_old_weights=finish_on_old_weights, seed=seed)
        asyncio.run(run_rl(plan, ports))
        assert ports.trainer.steps == [1, 2, 3, 4, 5]
        ages = trained_staleness(ports)
        assert all(0 <= age <= k for step_ages in ages.values() for age in step_ages), (seed, ages)
        metrics = step_metrics(ports)
        for step, step_ages in ages.items():
            assert metrics[step]["async/staleness_max"] == max(step_ages)
            assert metrics[step]["async/stale_dropped"] == 0
        # every step trained exactly its own problems: none twice, none skipped
        for step, datums in ports.trainer.batches.items():
            expected = {r.group_id for r in episodes.train_requests(step - 1, plan.batch_size, plan.seed)}
            assert {d.group_id for d in datums} == expected
            assert len(datums) == plan.batch_size * plan.group_size


def test_k0_is_the_synchronous_loop_and_k1_overlaps_rollout_with_training():
    ports, timeline = build(1)
    asyncio.run(run_rl(rl_plan(0, finish_on_old_weights=True), ports))
    starts = [e for e in timeline.events if e[0] == "rollout_start"]
    for step in range(1, 5):
        # batch `step` starts only after the weights of `step` optimizer steps reached the Rollout
        synced = next(i for i, e in enumerate(timeline.events) if e[0] == "synced" and e[2] == step)
        assert timeline.events.index(starts[step]) > synced
    overlapped = 0
    for seed in range(4):
        ports, timeline = build(seed, rollout_delay=0.01, trainer_delay=0.01)
        asyncio.run(run_rl(rl_plan(1, finish_on_old_weights=False), ports))
        starts = [i for i, e in enumerate(timeline.events) if e[0] == "rollout_start"]
        for step in range(1, 4):
            # batch step+1 starts before the optimizer step of batch `step` ends
            if starts[step + 1] < timeline.index("optim_end", step + 1):
                overlapped += 1
    assert overlapped >= 8, overlapped
    metrics = step_metrics(ports)
    assert {"time/rollout_idle_s", "time/trainer_idle_s", "async/staleness_mean"} <= set(metrics[3])
    assert max(m["async/staleness_max"] for m in metrics.values()) >= 1


def test_k0_trains_exactly_what_a_plain_synchronous_loop_trains():
    """The same trajectories and datums as rollout -> update -> sync, one after another."""
    from opentinker_coordinator.driver.datums import rl_datums

    ports, _ = build(5)
    plan = rl_plan(0, finish_on_old_weights=True)
    asyncio.run(run_rl(plan, ports))
    reference, timeline = build(5)

    async def plain_loop() -> dict[int, list]:
        trained = {}
        for step in range(plan.total_steps):
            requests = episodes.train_requests(step, plan.batch_size, plan.seed)
            batch = [t async for t in reference.rollout.run_episodes(requests, plan.group_size, evaluation=False)]
            trained[step + 1] = rl_datums(batch, plan.estimator, normalize_by_std=False)
            await reference.weights.sync()
        return trained

    expected = asyncio.run(plain_loop())  # (the driver's evaluations draw nothing from the rollout's stream)
    assert expected == ports.trainer.batches
    assert all(d.tokens[0] - 1000 == step - 1 for step, datums in expected.items() for d in datums)


def test_episodes_sampled_by_unknown_weights_are_dropped_counted_and_never_trained():
    ports, _ = build(2, lag_every=4)
    asyncio.run(run_rl(rl_plan(1, finish_on_old_weights=False), ports))
    assert ports.trainer.steps == [1, 2, 3, 4, 5]
    for datums in ports.trainer.batches.values():
        assert all(d.tokens[0] - 1000 >= 0 for d in datums)
    dropped = sum(m["async/stale_dropped"] for m in step_metrics(ports).values())
    assert dropped >= 5


def test_a_batch_with_only_stale_episodes_is_played_again_on_recent_weights():
    ports, _ = build(4, lag_every=1)  # every episode stale at first
    original = ports.rollout.run_episodes
    calls = {"n": 0}

    async def heal_after_first(requests, group_size, *, evaluation):
        if not evaluation:
            calls["n"] += 1
            ports.rollout.lag_every = 0 if calls["n"] > 1 else 1
        async for trajectory in original(requests, group_size, evaluation=evaluation):
            yield trajectory

    ports.rollout.run_episodes = heal_after_first
    asyncio.run(run_rl(rl_plan(1, finish_on_old_weights=False, steps=2), ports))
    assert ports.trainer.steps == [1, 2]
    metrics = step_metrics(ports)
    assert metrics[1]["async/stale_dropped"] == 6  # the whole first batch, then played again
    assert all(d.tokens[0] - 1000 >= 0 for datums in ports.trainer.batches.values() for d in datums)


@pytest.mark.parametrize("k", [1, 2])
def test_an_asynchronous_resume_trains_every_remaining_prompt_once_and_records_the_cursor(k):
    full, _ = build(7)
    asyncio.run(run_rl(rl_plan(k, finish_on_old_weights=True, steps=6), full))
    checkpoints = [e for e in full.reporter.events if e[0] == "checkpoint" and e[1].startswith("ckpt-step")]
    assert checkpoints and all(e[3]["async/rollout_cursor"] >= e[2] for e in checkpoints)
    resumed, _ = build(8, resumed_steps=2)
    plan = rl_plan(k, finish_on_old_weights=True, steps=6, resume=CheckpointRef(checkpoint_id="ckpt-step-2", step=2))
    asyncio.run(run_rl(plan, resumed))
    assert resumed.trainer.loaded == ["ckpt-step-2"] and resumed.trainer.steps == [3, 4, 5, 6]
    for step, datums in resumed.trainer.batches.items():
        expected = {r.group_id for r in episodes.train_requests(step - 1, plan.batch_size, plan.seed)}
        assert {d.group_id for d in datums} == expected
    # the restored weights were pushed before the first batch: nothing trained is stale
    assert all(age <= k for ages in trained_staleness(resumed).values() for age in ages)


def test_split_stale_by_hand():
    clock = PolicyClock(0)

    async def scenario():
        await clock.synced(3, 1)
        await clock.synced(7, 2)

    asyncio.run(scenario())
    old, recent, unknown = (_trajectory("g", v, reward=1.0) for v in (0, 7, 5))
    split = split_stale([old, recent, unknown], clock, step=2, max_staleness=1)
    assert split.fresh == [recent] and split.stale == [old, unknown] and split.staleness == [0]
    split = split_stale([old, recent], clock, step=2, max_staleness=2)
    assert split.stale == [] and split.staleness == [2, 0]
