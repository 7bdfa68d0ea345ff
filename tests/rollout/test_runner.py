"""RunEpisodes as a domain operation: groups, seeds, bounded concurrency, results as they
finish, and a crashed episode reported as an error while the others go on."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from opentinker_rollout.batcher import BatchedGeneration
from opentinker_rollout.engine import (
    FinishReason,
    Generation,
    GenerationRequest,
    SamplingConfig,
    derive_seed,
)
from opentinker_rollout.environment import ResetResult, StepOutcome
from opentinker_rollout.episode import EpisodeLimits, StopReason, Trajectory
from opentinker_rollout.runner import (
    EpisodeBatch,
    EpisodeError,
    EpisodeServices,
    EpisodeSpec,
    plan_episodes,
    run_episodes,
)
from tests.rollout._support import EOS, ScriptedRenderer


class EchoGenerator:
    """Samples [seed-derived token, EOS]; records the seeds it was asked for."""

    def __init__(self) -> None:
        self.seeds: list[int] = []

    async def generate(self, request: GenerationRequest) -> BatchedGeneration:
        self.seeds.append(request.sampling.seed)
        await asyncio.sleep(0)
        generation = Generation(token_ids=(request.sampling.seed % 100, EOS), logprobs=(-1.0, -1.0),
                                finish_reason=FinishReason.STOP)
        return BatchedGeneration(generations=[generation], policy_version=3)


class CountingEnvironment:
    """Single-turn; reward = the reset kwarg "value"; tracks how many sessions are open."""

    open_now = 0
    most_open = 0
    resets: list[tuple[dict, int]] = []

    def __init__(self, delay_s: float = 0.02, crash_value: Any = None) -> None:
        self.delay_s, self.crash_value, self.value = delay_s, crash_value, 0.0

    async def open(self) -> None:
        type(self).open_now += 1
        type(self).most_open = max(type(self).most_open, type(self).open_now)

    async def reset(self, kwargs: Mapping[str, Any], seed: int) -> ResetResult:
        type(self).resets.append((dict(kwargs), seed))
        if kwargs.get("value") == self.crash_value:
            raise KeyError("not an environment failure: a bug")
        self.value = float(kwargs["value"])
        return ResetResult(system_prompt="s", observation=str(kwargs["value"]))

    async def step(self, action: str, *, truncated: bool = False) -> StepOutcome:
        await asyncio.sleep(self.delay_s)
        return StepOutcome(reward=self.value, done=True)

    async def close(self) -> None:
        type(self).open_now -= 1


def play(batch: EpisodeBatch, **environment_kwargs) -> tuple[list, EchoGenerator]:
    CountingEnvironment.open_now = CountingEnvironment.most_open = 0
    CountingEnvironment.resets = []
    generator = EchoGenerator()
    services = EpisodeServices(generator=generator, renderer=ScriptedRenderer([1], [2]),
                               environments=lambda episode: CountingEnvironment(**environment_kwargs),
                               max_context_length=64)

    async def scenario():
        return [result async for result in run_episodes(batch, services)]

    return asyncio.run(scenario()), generator


def batch_of(specs, group_size=4, max_concurrency=64) -> EpisodeBatch:
    return EpisodeBatch(specs=tuple(specs), group_size=group_size, sampling=SamplingConfig(),
                        limits=EpisodeLimits(), max_concurrency=max_concurrency)


def test_every_spec_is_played_group_size_times_in_its_group():
    specs = [EpisodeSpec(group_id="a", reset_kwargs={"value": 1}, seed=11),
             EpisodeSpec(group_id="b", reset_kwargs={"value": 2}, seed=12)]
    results, _ = play(batch_of(specs, group_size=3))
    assert all(isinstance(r, Trajectory) for r in results)
    by_group = {(r.group_id, r.episode_index): r for r in results}
    assert sorted(by_group) == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
    assert {r.total_reward for r in results if r.group_id == "b"} == {2.0}
    assert by_group[("a", 1)].trajectory_id == "a:1"
    assert all(r.policy_version == 3 and r.metrics["sampled_tokens"] == 2 for r in results)


def test_a_group_resets_with_the_spec_seed_and_samples_with_derived_seeds():
    results, generator = play(batch_of([EpisodeSpec(group_id="a", reset_kwargs={"value": 1}, seed=5)]))
    assert [seed for _, seed in CountingEnvironment.resets] == [5, 5, 5, 5]
    expected = sorted(derive_seed(derive_seed(5, 0, i), 0) for i in range(4))
    assert sorted(generator.seeds) == expected
    again, generator_again = play(batch_of([EpisodeSpec(group_id="a", reset_kwargs={"value": 1}, seed=5)]))
    assert sorted(generator_again.seeds) == expected


def test_an_unseeded_spec_samples_unseeded_and_gets_a_fresh_group_id():
    episodes = plan_episodes(batch_of([EpisodeSpec(reset_kwargs={"value": 1})], group_size=2))
    assert {e.sampling_seed for e in episodes} == {0}
    assert len({e.group_id for e in episodes}) == 1 and episodes[0].group_id
    other = plan_episodes(batch_of([EpisodeSpec(reset_kwargs={"value": 1})], group_size=2))
    assert other[0].group_id != episodes[0].group_id


def test_concurrency_is_bounded():
    specs = [EpisodeSpec(group_id=f"g{i}", reset_kwargs={"value": i}, seed=i + 1) for i in range(5)]
    results, _ = play(batch_of(specs, group_size=4, max_concurrency=3))
    assert len(results) == 20 and CountingEnvironment.most_open == 3


def test_results_stream_in_completion_order():
    specs = [EpisodeSpec(group_id="slow", reset_kwargs={"value": 1}, seed=1),
             EpisodeSpec(group_id="fast", reset_kwargs={"value": 2}, seed=2)]
    CountingEnvironment.resets = []

    class Timed(CountingEnvironment):
        async def step(self, action: str, *, truncated: bool = False) -> StepOutcome:
            await asyncio.sleep(0.3 if self.value == 1 else 0.0)
            return StepOutcome(reward=self.value, done=True)

    services = EpisodeServices(generator=EchoGenerator(), renderer=ScriptedRenderer([1], [2]),
                               environments=lambda episode: Timed(), max_context_length=64)

    async def scenario():
        return [r.group_id async for r in run_episodes(batch_of(specs, group_size=1), services)]

    assert asyncio.run(scenario()) == ["fast", "slow"]


def test_a_crashed_episode_is_an_error_item_and_the_others_finish():
    specs = [EpisodeSpec(group_id="ok", reset_kwargs={"value": 1}, seed=1),
             EpisodeSpec(group_id="bug", reset_kwargs={"value": 13}, seed=2)]
    results, _ = play(batch_of(specs, group_size=2), crash_value=13)
    errors = [r for r in results if isinstance(r, EpisodeError)]
    trajectories = [r for r in results if isinstance(r, Trajectory)]
    assert len(errors) == 2 and {e.group_id for e in errors} == {"bug"}
    assert "KeyError" in errors[0].message and "Traceback" in errors[0].traceback
    assert len(trajectories) == 2 and all(t.stop_reason is StopReason.DONE for t in trajectories)
    assert CountingEnvironment.open_now == 0  # crashed episodes closed their sessions too
