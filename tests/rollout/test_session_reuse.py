"""Episodes reuse EnvHost sessions: one session per concurrent episode slot, reset for the next
episode, within one job's scope only.

A real EnvHost (its servicer and SessionManager, games in threads) on a real port serves
`SeededGame`; the Rollout's episode runner plays on it through the Rollout's own EnvHost client,
with a deterministic generator (each action is a function of its context and seed, whatever
order the episodes run in) and a byte-level renderer, so trajectories can be compared exactly.
One test goes through the Rollout service itself (RunEpisodes over gRPC, the tiny model), one
plays on a stand-in EnvHost that implements no Interact (unary calls then).
"""

from __future__ import annotations

import asyncio
import collections
import zlib
from collections.abc import Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import grpc
import pytest

from opentinker_api.common.v1 import model_pb2, resources_pb2, sampling_pb2
from opentinker_api.common.v1.environment_pb2 import EnvironmentReference
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as env_grpc
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_runtime.core.settings import ServiceSettings, port_setting
from opentinker_envhost.catalog import GameCatalog
from opentinker_envhost.limits import Isolation, SessionLimits
from opentinker_runtime.core.server import ServiceBinding
from opentinker_envhost.servicer import EnvHostServicer
from opentinker_envhost.sessions import SessionManager
from opentinker_rollout.batcher import BatchedGeneration
from opentinker_rollout.engine import FinishReason, Generation, GenerationRequest, SamplingConfig
from opentinker_rollout.envhost_client import EnvHostChannels, EnvironmentTarget, envhost_environments
from opentinker_rollout.envhost_sessions import SessionPools
from opentinker_rollout.episode import EpisodeLimits, StopReason, Trajectory
from opentinker_runtime.workers.reaping import attempt_callbacks
from opentinker_rollout.main import JobAttempts, build_plan
from opentinker_rollout.runner import EpisodeBatch, EpisodeServices, EpisodeSpec, run_episodes
from opentinker_rollout.settings import RolloutSettings
from tests.rollout._support import MODEL_NAME

GAMES = "seeded=tests.rollout._reuse_games:SeededGame"
EOS = 259


class CountingManager(SessionManager):
    """The EnvHost's real session manager, counting opens and noting which job each reset served."""

    def __init__(self, max_sessions: int = 256) -> None:
        super().__init__(GameCatalog.from_setting(GAMES),
                         SessionLimits(isolation=Isolation.THREAD, max_sessions=max_sessions))
        self.opens = 0
        self.resets: list[tuple[str, str, Mapping[str, Any]]] = []
        """(session id, the session's job id, the reset's kwargs) per reset."""

    async def open(self, *args: Any, **kwargs: Any) -> Any:
        self.opens += 1
        return await super().open(*args, **kwargs)

    async def reset(self, session_id: str, kwargs: Mapping[str, Any], **rest: Any) -> Any:
        self.resets.append((session_id, self.job_of(session_id), dict(kwargs)))
        return await super().reset(session_id, kwargs, **rest)


@dataclass(frozen=True, kw_only=True)
class EnvSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TESTENV_"
    port: int = port_setting(0)


class CountingServicer(EnvHostServicer):
    """The EnvHost's real servicer, counting the unary calls and Interact streams it serves."""

    def __init__(self, manager: SessionManager) -> None:
        super().__init__(manager)
        self.calls: collections.Counter[str] = collections.Counter()

    async def OpenSession(self, request, context):  # noqa: ANN001, ANN201, N802
        self.calls["OpenSession"] += 1
        return await super().OpenSession(request, context)

    async def Reset(self, request, context):  # noqa: ANN001, ANN201, N802
        self.calls["Reset"] += 1
        return await super().Reset(request, context)

    async def Step(self, request, context):  # noqa: ANN001, ANN201, N802
        self.calls["Step"] += 1
        return await super().Step(request, context)

    async def CloseSession(self, request, context):  # noqa: ANN001, ANN201, N802
        self.calls["CloseSession"] += 1
        return await super().CloseSession(request, context)

    async def Interact(self, request_iterator, context):  # noqa: ANN001, ANN201, N802
        self.calls["Interact"] += 1
        return await super().Interact(request_iterator, context)


@asynccontextmanager
async def envhost(max_sessions: int = 256):
    manager = CountingManager(max_sessions)
    manager.servicer = servicer = CountingServicer(manager)
    binding = ServiceBinding(full_name="opentinker.envhost.v1.EnvHostService", servicer=servicer,
                             add_to_server=env_grpc.add_EnvHostServiceServicer_to_server)
    server = await start_server(EnvSettings(auth="disabled"), ServerPlan(services=[binding]))
    try:
        yield manager, f"127.0.0.1:{server.port}"
    finally:
        await stop_server(server, grace_seconds=1)
        await manager.close_all()


class HashGenerator:
    """One action per call, a function of the context and the seed only: [crc % 200 + 1, EOS]."""

    async def generate(self, request: GenerationRequest) -> BatchedGeneration:
        await asyncio.sleep(0)
        crc = zlib.crc32(repr((request.prompt_ids, request.sampling.seed)).encode())
        generation = Generation(token_ids=(crc % 200 + 1, EOS), logprobs=(-0.25, -0.5),
                                finish_reason=FinishReason.STOP)
        return BatchedGeneration(generations=[generation], policy_version=0)


class ByteRenderer:
    """Text as its UTF-8 bytes (observations as they are, so trajectories show what games said)."""

    def prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return list("|".join(m["content"] for m in messages).encode())

    def observation(self, text: str, action_ids: Sequence[int]) -> list[int]:
        return list(text.encode())

    def action_text(self, action_ids: Sequence[int]) -> str:
        return " ".join(str(t) for t in action_ids if t != EOS)

    def decode(self, token_ids: Sequence[int]) -> str:
        return bytes(t for t in token_ids if t < 256).decode(errors="replace")


def batch(count: int, *, concurrency: int, tag: str = "", group_size: int = 1, timeout_s: float | None = None,
          special: Mapping[int, Mapping[str, Any]] | None = None) -> EpisodeBatch:
    specs = tuple(EpisodeSpec(group_id=f"{tag}g{i}", seed=1000 + i,
                              reset_kwargs={"index": i, "tag": tag, **(special or {}).get(i, {})})
                  for i in range(count))
    return EpisodeBatch(specs=specs, group_size=group_size, max_concurrency=concurrency,
                        sampling=SamplingConfig(max_new_tokens=4, seed=7),
                        limits=EpisodeLimits(max_turns=5, timeout_s=timeout_s))


async def play(channels: EnvHostChannels, target: EnvironmentTarget, episodes: EpisodeBatch, *,
               reuse: bool = True) -> dict[str, Trajectory]:
    services = EpisodeServices(generator=HashGenerator(), renderer=ByteRenderer(), max_context_length=4096,
                               environments=envhost_environments(channels, target, reuse_sessions=reuse))
    results = [result async for result in run_episodes(episodes, services)]
    assert all(isinstance(result, Trajectory) for result in results), results
    return {result.trajectory_id: result for result in results}


def job_target(address: str, job_id: str = "job-a", token: str = "") -> EnvironmentTarget:
    return EnvironmentTarget(address=address, env_name="seeded", config={"turns": 3}, job_id=job_id, job_token=token)


def test_episodes_of_a_job_reuse_one_session_per_slot_across_calls_and_close_them_at_the_end() -> None:
    async def scenario() -> None:
        async with envhost() as (manager, address):
            channels = EnvHostChannels()
            first = await play(channels, job_target(address), batch(6, concurrency=2))
            second = await play(channels, job_target(address), batch(6, concurrency=2, tag="b"))
            assert manager.opens == 2, "two episode slots need two sessions, for both calls"
            assert len(manager.resets) == 12 and len({r[0] for r in manager.resets}) == 2
            assert all(t.stop_reason is StopReason.DONE and len(t.turns) == 3
                       for t in [*first.values(), *second.values()])
            assert all(t.metrics["env_overhead_seconds"] > 0 for t in first.values())
            assert len(manager.sessions) == 2  # parked for the job's next call
            assert manager.servicer.calls == {"Interact": 2}, "each session plays over its own Interact stream"
            await channels.close()
            assert manager.sessions == {}, "the Rollout closes its parked sessions when it stops"
            assert manager.servicer.calls["CloseSession"] == 2

    asyncio.run(scenario())


def test_a_session_that_failed_is_closed_and_replaced_never_reused() -> None:
    async def scenario() -> None:
        async with envhost() as (manager, address):
            channels = EnvHostChannels()
            # one slot: a game error (episode 1) and a hung step cut by the time limit (episode 3)
            results = await play(channels, job_target(address), batch(
                5, concurrency=1, timeout_s=2.0, special={1: {"explode": True}, 3: {"sleep_s": 3.0}}))
            stops = [results[f"g{i}:0"].stop_reason for i in range(5)]
            assert stops == [StopReason.DONE, StopReason.ENV_ERROR, StopReason.DONE, StopReason.ENV_ERROR,
                             StopReason.DONE]
            assert "Step failed: INTERNAL: SeededGame.step() raised ValueError: the game exploded" in (
                results["g1:0"].env_error)
            assert "did not answer within the episode's time limit" in results["g3:0"].env_error
            sessions = [r[0] for r in manager.resets]
            assert sessions[0] == sessions[1] != sessions[2] == sessions[3] != sessions[4]
            assert manager.opens == 3
            await asyncio.sleep(0.2)  # the failed sessions' closes run in the background
            assert set(manager.sessions) == {sessions[4]}
            await channels.close()
            assert manager.sessions == {}

    asyncio.run(scenario())


def test_parked_sessions_the_envhost_closed_meanwhile_are_replaced_without_failing_an_episode() -> None:
    async def scenario() -> None:
        async with envhost() as (manager, address):
            channels = EnvHostChannels()
            await play(channels, job_target(address), batch(2, concurrency=2))
            for session_id in list(manager.sessions):  # e.g. its idle reaper, or a restart
                await manager.close(session_id)
            results = await play(channels, job_target(address), batch(4, concurrency=2, tag="b"))
            assert all(t.stop_reason is StopReason.DONE and not t.env_error for t in results.values())
            assert manager.opens == 4 and len(manager.sessions) == 2
            await channels.close()

    asyncio.run(scenario())


def test_a_call_without_a_job_closes_its_sessions_when_it_ends() -> None:
    async def scenario() -> None:
        async with envhost() as (manager, address):
            channels = EnvHostChannels()
            await play(channels, job_target(address, job_id=""), batch(4, concurrency=2))
            assert manager.opens == 2 and manager.sessions == {}
            await play(channels, job_target(address, job_id=""), batch(4, concurrency=2))
            assert manager.opens == 4, "a call without a job never reuses another call's sessions"
            await channels.close()

    asyncio.run(scenario())


def test_parked_sessions_close_when_idle_or_when_the_job_stops() -> None:
    async def scenario() -> None:
        async with envhost() as (manager, address):
            channels = EnvHostChannels(sessions=SessionPools(idle_ttl_s=0.3))
            await play(channels, job_target(address), batch(2, concurrency=2))
            assert len(manager.sessions) == 2
            await asyncio.sleep(0.8)
            assert manager.sessions == {}, "parked sessions idle past the TTL are closed"
            await play(channels, job_target(address, "job-b"), batch(2, concurrency=2))
            await play(channels, job_target(address, "job-c"), batch(1, concurrency=1))
            await channels.sessions.job_stopped("job-b")
            assert [s.job_id for s in manager.sessions.values()] == ["job-c"]
            await channels.close()

    asyncio.run(scenario())


class RecordingRegistry:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def attempt_assigned(self, job_id: str, fencing_token: int) -> None:
        self.calls.append(("assigned", job_id))

    async def job_stopped(self, job_id: str) -> None:
        self.calls.append(("stopped", job_id))


def test_the_schedulers_stop_of_a_job_closes_its_parked_sessions_at_once() -> None:
    async def scenario() -> None:
        async with envhost() as (manager, address):
            channels = EnvHostChannels()
            registry = RecordingRegistry()
            callbacks = attempt_callbacks(JobAttempts(registry, channels.sessions))  # type: ignore[arg-type]
            await play(channels, job_target(address, "job-b"), batch(2, concurrency=2))
            await play(channels, job_target(address, "job-c"), batch(1, concurrency=1))
            assert len(manager.sessions) == 3  # parked, not closed
            await callbacks["on_stop"]("job-b")
            await asyncio.sleep(0.2)
            assert [s.job_id for s in manager.sessions.values()] == ["job-c"]
            assert registry.calls == [("stopped", "job-b")]
            await channels.close()

    asyncio.run(scenario())


def test_two_jobs_or_two_attempts_of_a_job_never_share_a_session() -> None:
    async def scenario() -> None:
        async with envhost() as (manager, address):
            channels = EnvHostChannels()
            await play(channels, job_target(address, "job-a", "token-1"), batch(3, concurrency=3, tag="job-a"))
            await asyncio.gather(  # both jobs at once, on parked and new sessions
                play(channels, job_target(address, "job-b", "token-9"), batch(4, concurrency=2, tag="job-b")),
                play(channels, job_target(address, "job-a", "token-1"), batch(4, concurrency=2, tag="job-a")))
            assert manager.opens == 5
            assert all(session_job == kwargs["tag"] for _, session_job, kwargs in manager.resets)
            # the job's next attempt (another token) gets sessions of its own; the old attempt's close
            await play(channels, job_target(address, "job-a", "token-2"), batch(2, concurrency=2, tag="job-a"))
            assert manager.opens == 7
            await asyncio.sleep(0.2)
            attempts = {s.session_id for s in manager.sessions.values() if s.job_id == "job-a"}
            assert attempts == {r[0] for r in manager.resets[-2:]}, "only the new attempt's sessions stay"
            await channels.close()

    asyncio.run(scenario())


def test_a_full_envhost_gets_sessions_parked_by_other_jobs_closed_to_make_room() -> None:
    async def scenario() -> None:
        async with envhost(max_sessions=2) as (manager, address):
            channels = EnvHostChannels()
            await play(channels, job_target(address, "job-a"), batch(2, concurrency=2, tag="job-a"))
            assert [s.job_id for s in manager.sessions.values()] == ["job-a", "job-a"]
            results = await play(channels, job_target(address, "job-b"), batch(3, concurrency=1, tag="job-b"))
            assert all(t.stop_reason is StopReason.DONE for t in results.values())
            assert sorted(s.job_id for s in manager.sessions.values()) == ["job-a", "job-b"]
            assert all(session_job == kwargs["tag"] for _, session_job, kwargs in manager.resets)
            await channels.close()

    asyncio.run(scenario())


def test_reused_sessions_play_exactly_as_fresh_sessions() -> None:
    async def scenario() -> tuple[dict[str, Trajectory], dict[str, Trajectory], list[int]]:
        async with envhost() as (manager, address):
            channels = EnvHostChannels()
            fresh = await play(channels, job_target(address), batch(4, concurrency=2, group_size=2), reuse=False)
            opens = [manager.opens]
            reused = await play(channels, job_target(address), batch(4, concurrency=2, group_size=2))
            opens.append(manager.opens - opens[0])
            await channels.close()
            return fresh, reused, opens

    fresh, reused, opens = asyncio.run(scenario())
    assert opens == [8, 2]
    assert fresh.keys() == reused.keys() and len(fresh) == 8
    for key, trajectory in fresh.items():
        other = reused[key]
        assert (other.token_ids, other.loss_mask, other.total_reward, other.prompt_text) == (
            trajectory.token_ids, trajectory.loss_mask, trajectory.total_reward, trajectory.prompt_text)
        assert [t.observation_text for t in other.turns] == [t.observation_text for t in trajectory.turns]
    assert len({t.prompt_text for t in fresh.values()}) == 4  # the episodes differ by problem


LEASE = resources_pb2.LeaseContext(job_id="job-7", lease_id="l1", fencing_token=3)


def test_the_rollout_service_reuses_a_jobs_sessions_across_run_episodes_calls(tmp_path) -> None:
    async def scenario() -> None:
        async with envhost() as (manager, address):
            settings = RolloutSettings(auth="disabled", port=0, checkpoint_dir=tmp_path, max_batch_size=8,
                                       envhost_address=address, max_concurrent_episodes=2)
            plan = await build_plan(settings)
            server = await start_server(settings, plan)
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                    stub = pb_grpc.RolloutServiceStub(channel)
                    policy = (await stub.LoadModel(pb.LoadModelRequest(request_id="load", lease=LEASE, model=(
                        model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=MODEL_NAME, seed=0)))))).policy
                    for call in range(2):
                        items = [item async for item in stub.RunEpisodes(service_request(policy.policy_id, call))]
                        assert len(items) == 4 and all(not i.trajectory.env_error for i in items), items
                    assert manager.opens == 2 and len(manager.resets) == 8
                    assert len(manager.sessions) == 2  # parked between the calls
                    await stub.UnloadModel(pb.UnloadModelRequest(policy_id=policy.policy_id, lease=LEASE))
                    assert manager.sessions == {}, "the job's end (its policy unloaded) closes its sessions"
            finally:
                await stop_server(server, grace_seconds=1)
                for hook in plan.close_hooks:
                    await hook()
            assert manager.sessions == {}

    asyncio.run(scenario())


def service_request(policy_id: str, call: int) -> pb.RunEpisodesRequest:
    environment = EnvironmentReference(env_name="seeded")
    environment.config.update({"turns": 2})
    specs = [pb.EpisodeSpec(group_id=f"c{call}q{i}", seed=i + 1) for i in range(4)]
    for i, spec in enumerate(specs):
        spec.reset_kwargs.update({"index": i})
    return pb.RunEpisodesRequest(
        policy_id=policy_id, lease=LEASE, environment=environment, episodes=specs, group_size=1,
        limits=sampling_pb2.AgentLoopLimits(max_turns=2),
        sampling=sampling_pb2.SamplingParams(max_new_tokens=2, temperature=1.0, stop_token_ids=list(range(260))))


def test_a_call_past_its_timeout_fails_the_episode_and_its_session_is_replaced() -> None:
    async def scenario() -> None:
        async with envhost() as (manager, address):
            channels = EnvHostChannels()
            services = EpisodeServices(
                generator=HashGenerator(), renderer=ByteRenderer(), max_context_length=4096,
                environments=envhost_environments(channels, job_target(address), call_timeout_s=0.5))
            episodes = batch(3, concurrency=1, special={1: {"sleep_s": 1.5}})
            results = {r.trajectory_id: r async for r in run_episodes(episodes, services)}
            assert results["g1:0"].stop_reason is StopReason.ENV_ERROR
            assert "Step failed: DEADLINE_EXCEEDED: no answer within 0.5 s" in results["g1:0"].env_error
            assert results["g2:0"].stop_reason is StopReason.DONE and manager.opens == 2
            await channels.close()
            assert manager.sessions == {}

    asyncio.run(scenario())


def test_an_envhost_without_interact_is_played_with_unary_calls() -> None:
    from tests.rollout._servers import CountingGame  # a stand-in EnvHost: unary RPCs only (its
    # sessions count steps across resets, so only the first episode on each is two turns long)

    async def scenario() -> tuple[CountingGame, dict[str, Trajectory], set[str]]:
        game = CountingGame()
        binding = ServiceBinding(full_name="opentinker.envhost.v1.EnvHostService", servicer=game,
                                 add_to_server=env_grpc.add_EnvHostServiceServicer_to_server)
        server = await start_server(EnvSettings(auth="disabled"), ServerPlan(services=[binding]))
        channels = EnvHostChannels()
        try:
            target = EnvironmentTarget(address=f"127.0.0.1:{server.port}", env_name="count", job_id="job-a")
            episodes = EpisodeBatch(specs=tuple(EpisodeSpec(reset_kwargs={"start": i}) for i in range(4)),
                                    max_concurrency=2, sampling=SamplingConfig(max_new_tokens=4),
                                    limits=EpisodeLimits(max_turns=5))
            results = await play(channels, target, episodes)
            unary_only = set(channels.unary_only)
            await channels.close()
            return game, results, unary_only
        finally:
            await stop_server(server, grace_seconds=1)

    game, results, unary_only = asyncio.run(scenario())
    assert len(results) == 4 and not any(t.env_error for t in results.values())
    assert len(game.sessions) == 2 and len(game.resets) == 4 and game.closed == 2
    assert unary_only == {next(iter(unary_only))} and unary_only.pop().startswith("127.0.0.1:")


def test_an_envhost_behind_a_proxy_that_breaks_streams_is_played_with_unary_calls() -> None:
    """A proxy serving every method as unary answers the stream's open, then fails its reset at
    the RPC level: the session falls back to unary calls, and so does the address after it."""
    from tests.chaos._metadata_spy import MetadataSpy
    from opentinker_runtime.core.embedded_redis import free_port

    async def scenario() -> None:
        async with envhost() as (manager, address):
            spy = MetadataSpy(target=address)
            port = free_port()
            spy.start(port)
            try:
                channels = EnvHostChannels()
                proxied = job_target(f"127.0.0.1:{port}", "job-p")
                results = await play(channels, proxied, batch(3, concurrency=1))
                assert all(r.stop_reason is StopReason.DONE for r in results.values()), results
                methods = [seen.method.rsplit("/", 1)[-1] for seen in spy.calls]
                assert methods.count("Interact") == 1, methods  # tried once, then never again
                assert {"OpenSession", "Reset", "Step"} <= set(methods)
                await channels.close()
            finally:
                spy.stop()

    asyncio.run(scenario())
