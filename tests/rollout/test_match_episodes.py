"""Match episodes: the Rollout plays seats of Coordinator matches (multi-agent gomoku).

On real sockets: an in-process Coordinator server (the real CoordinatorServicer over an
`AgentProtocol` stepping GomokuGame in-process) and a real Rollout server holding two LoRA
policies, agent A and agent B. Each agent's RunEpisodes plays its seat of every match while
the other agent's call plays the other seat, so their turns interleave through the Coordinator.

The policies' base is a crafted tiny llama (`craft_move_model`): its layers are zeroed, so the
next token depends only on the current one, and its head turns "\\n" (the end of the generation
prompt) into a column a-c, a column into a row 1-3, and a row into <|im_end|>. So every action
is a random cell of the 3x3 board (sampled, seeded) and real games are played: moves on taken
cells are rejected and retried, and a game ends in a line, a draw or a forfeit.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import grpc
import pytest
import torch
from google.protobuf import duration_pb2
from transformers import LlamaConfig, LlamaForCausalLM

from opentinker_api.common.v1 import model_pb2, resources_pb2, sampling_pb2, trajectory_pb2
from opentinker_api.common.v1.environment_pb2 import EnvironmentReference
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_runtime.core.settings import ServiceSettings, port_setting
from opentinker_runtime.games.gomoku_game import GomokuGame
from opentinker_runtime.ml.models import save_model_dir
from opentinker_runtime.ml.tokenizer import build_byte_tokenizer
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.protocol.matches import Match, MatchState
from opentinker_coordinator.runs import RunRegistry, RunState
from opentinker_coordinator.protocol.seated_environment import MatchEnvironmentRef
from opentinker_coordinator.servicer import coordinator_service_binding
from opentinker_rollout.engine import FinishReason
from opentinker_rollout.environment import ResetResult, StepOutcome
from opentinker_rollout.episode import EpisodeLimits, StopReason, TruncatedActions, to_trajectory
from opentinker_rollout.main import build_plan
from opentinker_rollout.rendering import TokenizerRenderer
from opentinker_rollout.settings import RolloutSettings
from tests.coordinator.seated_games import factory_of
from tests.rollout._agent_loop import play as play_scripted
from tests.rollout._support import EOS, ScriptedEnvironment

JOB = "duel"
LEASE = resources_pb2.LeaseContext(job_id=JOB, lease_id="l1", fencing_token=1)
GOMOKU = {"size": 3, "win_length": 3, "opponent": "none"}
STONES = {"black": "X", "white": "O"}
CELLS = [f"{col}{row}" for row in "123" for col in "abc"]
SCENARIO_TIMEOUT_S = 60.0


# ---- the crafted move-playing model --------------------------------------------------------------

def craft_move_model(directory: Path) -> Path:
    """A 1-layer llama whose next token depends only on the current one (see the module docstring)."""
    config = LlamaConfig(vocab_size=260, pad_token_id=256, bos_token_id=257, eos_token_id=EOS,
                         tie_word_embeddings=False, hidden_size=16, intermediate_size=16,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=2048)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()  # attention and MLP add nothing: the residual stream is the embedding
        for norm in (model.model.norm, *(m for layer in model.model.layers
                                         for m in (layer.input_layernorm, layer.post_attention_layernorm))):
            norm.weight.fill_(1.0)
        embedding, head = model.model.embed_tokens.weight, model.lm_head.weight
        embedding[:, 3] = 1.0            # any other token -> <|im_end|>
        head[EOS, 3] = 10.0
        chain = [("\n", [ord(c) for c in "abc"]), ("abc", [ord(r) for r in "123"]), ("123", [EOS])]
        for dim, (current, following) in enumerate(chain):
            for char in current:
                embedding[ord(char)] = 0.0
                embedding[ord(char), dim] = 1.0
            for token in following:
                head[token, dim] = 10.0  # after normalisation: logit 40 vs 0 for every other token
    return save_model_dir(model, build_byte_tokenizer(), directory)


@pytest.fixture(scope="module")
def move_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return craft_move_model(tmp_path_factory.mktemp("move-model"))


# ---- the servers -----------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class CoordinatorTestSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TESTCOORDINATOR_"
    port: int = port_setting(0)


@dataclass(kw_only=True)
class Stack:
    rollout: pb_grpc.RolloutServiceStub
    protocol: AgentProtocol
    coordinator_address: str
    policies: dict[str, str]
    """Policy id by agent id ("A", "B")."""


async def _no_runs(run: RunState) -> None:
    """The RunRegistry's launcher: these tests drive no jobs, they only host matches."""


async def with_stack(scenario: Callable[[Stack], Awaitable[Any]], model_dir: Path, tmp_path: Path,
                     max_concurrent_episodes: int = 256) -> Any:
    protocol = AgentProtocol(factory_of(lambda config: GomokuGame(**config)))
    coordinator = await start_server(CoordinatorTestSettings(auth="disabled"), ServerPlan(
        services=[coordinator_service_binding(RunRegistry(_no_runs), protocol)]))
    settings = RolloutSettings(auth="disabled", port=0, checkpoint_dir=tmp_path, max_batch_size=16,
                               envhost_address="127.0.0.1:1", max_concurrent_episodes=max_concurrent_episodes)
    plan = await build_plan(settings)
    rollout = await start_server(settings, plan)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{rollout.port}") as channel:
            stub = pb_grpc.RolloutServiceStub(channel)
            policies = {agent: await load_policy(stub, model_dir, agent) for agent in ("A", "B")}
            stack = Stack(rollout=stub, protocol=protocol, policies=policies,
                          coordinator_address=f"127.0.0.1:{coordinator.port}")
            async with asyncio.timeout(SCENARIO_TIMEOUT_S):
                return await scenario(stack)
    finally:
        await stop_server(rollout, grace_seconds=1)
        for hook in plan.close_hooks:
            await hook()
        await protocol.close()
        await stop_server(coordinator, grace_seconds=1)


async def load_policy(stub: pb_grpc.RolloutServiceStub, model_dir: Path, agent: str) -> str:
    request = pb.LoadModelRequest(
        request_id=f"load-{agent}", lease=LEASE,
        model=model_pb2.ModelReference(local=model_pb2.LocalModel(path=str(model_dir))),
        adaptation=model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=2, alpha=4.0)))
    return (await stub.LoadModel(request)).policy.policy_id


async def open_matches(protocol: AgentProtocol, count: int, tag: str) -> list[Match]:
    return [await protocol.open_match(job_id=JOB, request_id=f"{tag}-{i}",
                                      environment=MatchEnvironmentRef(env_name="gomoku", config=GOMOKU))
            for i in range(count)]


def seat_request(stack: Stack, agent: str, seats: list[tuple[Match, str]], *, seed_base: int,
                 max_new_tokens: int = 8, max_turns: int = 20, timeout_s: int = 30) -> pb.RunEpisodesRequest:
    """RunEpisodes for `agent` playing (match, seat) pairs; spec i is seeded seed_base + i."""
    return pb.RunEpisodesRequest(
        policy_id=stack.policies[agent], lease=LEASE, agent_id=agent,
        coordinator_address=stack.coordinator_address,
        episodes=[pb.EpisodeSpec(group_id=f"g{i}", match_id=match.match_id, seat=seat, seed=seed_base + i)
                  for i, (match, seat) in enumerate(seats)],
        sampling=sampling_pb2.SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0),
        limits=sampling_pb2.AgentLoopLimits(max_turns=max_turns,
                                            episode_timeout=duration_pb2.Duration(seconds=timeout_s)))


async def trajectories(stack: Stack, request: pb.RunEpisodesRequest) -> list[trajectory_pb2.Trajectory]:
    items = [item async for item in stack.rollout.RunEpisodes(request)]
    assert all(item.HasField("trajectory") for item in items), items
    return [item.trajectory for item in items]


async def play_duel(stack: Stack, tag: str, count: int = 4) -> tuple[list[Match], dict[str, list]]:
    """A plays black and B white in `count` fresh matches (B's replies are cut at 2 tokens)."""
    matches = await open_matches(stack.protocol, count, tag)
    black = seat_request(stack, "A", [(m, "black") for m in matches], seed_base=100)
    white = seat_request(stack, "B", [(m, "white") for m in matches], seed_base=200, max_new_tokens=2)
    played_a, played_b = await asyncio.gather(trajectories(stack, black), trajectories(stack, white))
    return matches, {"A": played_a, "B": played_b}


# ---- what a seat's trajectory must show ----------------------------------------------------------

RENDERER = TokenizerRenderer(build_byte_tokenizer())
MOVE_MARK = re.compile(r"([XO]): ([a-z]\d+)")


def spans(mask: list[int], flag: int) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of `flag` in the loss mask."""
    runs, start = [], None
    for index, value in enumerate([*mask, 1 - flag]):
        if value == flag and start is None:
            start = index
        elif value != flag and start is not None:
            runs.append((start, index))
            start = None
    return runs


def check_seat(t: trajectory_pb2.Trajectory, match: Match, agent: str) -> None:
    seat = t.seat
    assert (t.match_id, t.agent_id) == (match.match_id, agent) and match.agents_by_seat[seat] == agent
    assert t.stop_reason == trajectory_pb2.STOP_REASON_DONE
    assert t.outcome == match.outcomes_by_seat[seat]
    assert t.total_reward == pytest.approx(match.totals_by_seat[seat])
    tokens, mask = list(t.token_ids), list(t.loss_mask)
    # the sampled spans are exactly this agent's own actions in the match, in order
    sampled = [RENDERER.action_text(tokens[start:end]) for start, end in spans(mask, 1)]
    assert sampled == [a.action for a in match.history if a.agent_id == agent]
    # the other seat's accepted moves reach this seat only as observations (mask 0), in order;
    # a move that ended the match is only in the final observation, kept as text
    others = [a for a in match.history if a.agent_id != agent and a.accepted]
    if others and others[-1] is match.history[-1]:
        others = others[:-1]
    observed = "".join(RENDERER.decode(tokens[start:end]) for start, end in spans(mask, 0))
    assert MOVE_MARK.findall(observed) == [(STONES[a.seat], a.action) for a in others]
    assert not MOVE_MARK.findall("".join(RENDERER.decode(tokens[s:e]) for s, e in spans(mask, 1)))


# ---- tests ---------------------------------------------------------------------------------------

def test_two_policies_play_their_seats_of_every_match(move_model, tmp_path):
    async def scenario(stack: Stack):
        return await play_duel(stack, "duel")

    matches, played = asyncio.run(with_stack(scenario, move_model, tmp_path))
    assert all(m.state is MatchState.FINISHED for m in matches)
    assert all(sum(m.rewards_by_seat.values()) == 0 for m in matches)
    by_match = {m.match_id: m for m in matches}
    for agent, seat in (("A", "black"), ("B", "white")):
        assert sorted(t.match_id for t in played[agent]) == sorted(by_match)
        for t in played[agent]:
            assert t.seat == seat
            check_seat(t, by_match[t.match_id], agent)
    # real games: both seats placed stones in every match, and B's replies (cut at 2 tokens, no
    # <|im_end|>) were judged by the game rather than ending the episode
    assert all({a.seat for a in m.history if a.accepted} == {"black", "white"} for m in matches)
    for t in played["B"]:
        assert all(turn.action_end - turn.action_start == 2 for turn in t.turns)
        assert EOS not in [tok for tok, m in zip(t.token_ids, t.loss_mask, strict=True) if m]


def test_the_same_seeds_replay_the_same_matches(move_model, tmp_path):
    async def scenario(stack: Stack):
        return [await play_duel(stack, f"replay-{run}", count=2) for run in range(2)]

    first, second = asyncio.run(with_stack(scenario, move_model, tmp_path))

    def record(run):
        matches, played = run
        histories = [[(a.seat, a.agent_id, a.action, a.accepted) for a in m.history] for m in matches]
        tokens = {(agent, t.group_id): list(t.token_ids) for agent, ts in played.items() for t in ts}
        return histories, tokens

    assert record(first) == record(second)
    assert len(record(first)[1]) == 4


def test_match_episodes_are_not_queued_behind_the_worker_concurrency_bound(move_model, tmp_path):
    """One episode at a time would deadlock here: A starts with m0, B with m1, and each waits
    for the other's first move in the match the other has not started."""
    async def scenario(stack: Stack):
        m0, m1 = await open_matches(stack.protocol, 2, "order")
        a = seat_request(stack, "A", [(m0, "black"), (m1, "white")], seed_base=500)
        b = seat_request(stack, "B", [(m1, "black"), (m0, "white")], seed_base=600)
        played = await asyncio.gather(trajectories(stack, a), trajectories(stack, b))
        return (m0, m1), played

    matches, played = asyncio.run(with_stack(scenario, move_model, tmp_path, max_concurrent_episodes=1))
    assert all(m.state is MatchState.FINISHED for m in matches)
    assert all(t.stop_reason == trajectory_pb2.STOP_REASON_DONE for ts in played for t in ts)


def test_an_opponent_that_leaves_or_is_lost_ends_the_episode(move_model, tmp_path):
    async def scenario(stack: Stack):
        protocol = stack.protocol
        leaves_early, leaves_later, lost, quits, absent = await open_matches(protocol, 5, "edge")

        async def in_progress(match: Match) -> None:
            while match.state is MatchState.WAITING_FOR_AGENTS:
                await asyncio.sleep(0.01)

        async def leave_before_any_move():  # A is white: its match ends before its first turn
            protocol.join(leaves_early.match_id, "B1", "black")
            await in_progress(leaves_early)
            await protocol.leave(leaves_early.match_id, "B1")

        async def leave_after_a_move():  # A is black: its first action is answered by a forfeit
            protocol.join(leaves_later.match_id, "B2", "white")
            await protocol.await_turn(leaves_later.match_id, "B2")
            await protocol.leave(leaves_later.match_id, "B2")

        async def get_lost():  # A is white: the opponent's worker is lost, the match aborted
            protocol.join(lost.match_id, "B3", "black")
            await in_progress(lost)
            await protocol.agent_lost(JOB, "B3", "its worker died")

        async def play_on():  # A is black and stops after max_turns=1: leaving forfeits
            protocol.join(quits.match_id, "B4", "white")
            await protocol.await_turn(quits.match_id, "B4")
            for cell in CELLS:
                if (await protocol.submit(quits.match_id, "B4", quits.turn_index, cell)).accepted:
                    break
            return await protocol.await_turn(quits.match_id, "B4")

        opponents = [asyncio.create_task(f()) for f in (leave_before_any_move, leave_after_a_move,
                                                        get_lost, play_on)]
        request = seat_request(stack, "A", [(leaves_early, "white"), (leaves_later, "black"),
                                            (lost, "white"), (quits, "black")], seed_base=300, max_turns=1)
        played = {t.match_id: t for t in await trajectories(stack, request)}
        last_turn_of_b4 = (await asyncio.gather(*opponents))[-1]
        # nobody ever sits down opposite A: the episode's own time limit ends the wait (ENV_ERROR)
        alone = await trajectories(stack, seat_request(stack, "A", [(absent, "black")], seed_base=400,
                                                       timeout_s=1))
        return (leaves_early, leaves_later, lost, quits, absent), played, last_turn_of_b4, alone[0]

    (leaves_early, leaves_later, lost, quits, absent), played, last_turn_of_b4, alone = asyncio.run(
        with_stack(scenario, move_model, tmp_path))

    early = played[leaves_early.match_id]
    assert early.stop_reason == trajectory_pb2.STOP_REASON_DONE and early.outcome == "win"
    assert early.total_reward == 1.0 and early.prompt_length > 0 and not early.turns
    assert set(early.loss_mask) == {0} and set(early.token_rewards) == {0.0}

    later = played[leaves_later.match_id]
    assert later.stop_reason == trajectory_pb2.STOP_REASON_DONE and later.outcome == "win"
    assert len(later.turns) == 1 and later.total_reward == 1.0 == leaves_later.totals_by_seat["black"]

    aborted = played[lost.match_id]
    assert lost.state is MatchState.ABORTED
    assert aborted.stop_reason == trajectory_pb2.STOP_REASON_ENV_ERROR
    assert "ABORTED (AGENT_LOST)" in aborted.env_error and "its worker died" in aborted.env_error

    quitter = played[quits.match_id]
    assert quitter.stop_reason == trajectory_pb2.STOP_REASON_MAX_TURNS and len(quitter.turns) == 1
    assert quits.state is MatchState.FINISHED
    assert quits.outcomes_by_seat == {"black": "forfeit", "white": "win"}
    assert last_turn_of_b4.finished and last_turn_of_b4.outcome == "win" and last_turn_of_b4.reward == 1.0

    # the wait for an opponent is the environment's time: the episode fails (never trained on)
    assert alone.stop_reason == trajectory_pb2.STOP_REASON_ENV_ERROR
    assert "did not answer within the episode's time limit (1 s" in alone.env_error
    assert absent.state is MatchState.ABORTED and "left before the match started" in absent.message


def test_match_requests_are_validated_with_the_field_named(move_model, tmp_path):
    async def scenario(stack: Stack):
        def request(**changes) -> pb.RunEpisodesRequest:
            base = pb.RunEpisodesRequest(
                policy_id=stack.policies["A"], lease=LEASE, agent_id="A",
                coordinator_address=stack.coordinator_address,
                episodes=[pb.EpisodeSpec(match_id="m1", seat="black")])
            for name, value in changes.items():
                if name == "episodes":
                    del base.episodes[:]
                    base.episodes.extend(value)
                else:
                    setattr(base, name, value)
            return base

        cases = {
            "episodes[1].match_id": request(episodes=[pb.EpisodeSpec(match_id="m1", seat="black"),
                                                      pb.EpisodeSpec(group_id="plain")]),
            "episodes[0].match_id": request(episodes=[pb.EpisodeSpec(seat="black")]),
            "episodes[0].seat": request(episodes=[pb.EpisodeSpec(match_id="m1")]),
            "episodes[2].match_id": request(episodes=[pb.EpisodeSpec(match_id=m, seat="black")
                                                      for m in ("m1", "m2", "m1")]),
            "coordinator_address": request(coordinator_address=""),
            "agent_id": request(agent_id=""),
            "group_size": request(group_size=2),
            "environment.env_name": pb.RunEpisodesRequest(
                policy_id=stack.policies["A"], lease=LEASE, environment=EnvironmentReference(),
                episodes=[pb.EpisodeSpec(group_id="plain")]),
        }
        errors = {}
        for field, bad in cases.items():
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                _ = [item async for item in stack.rollout.RunEpisodes(bad)]
            errors[field] = caught.value
        return errors

    errors = asyncio.run(with_stack(scenario, move_model, tmp_path))
    for field, error in errors.items():
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, error.details())
        assert error.details().startswith(f"{field}:"), (field, error.details())


# ---- the agent loop's two match rules, with scripted fakes --------------------------------------

class CutActionsAccepted(ScriptedEnvironment):
    accepts_truncated_actions = True


def test_a_reset_that_is_already_done_ends_the_episode_with_its_reward():
    environment = ScriptedEnvironment(reset_result=ResetResult(
        system_prompt="sys", observation="the opponent left", done=True, reward=1.0,
        info={"seat": "white", "outcome": "win", "correct": True}))
    episode, generator, environment = play_scripted([], environment=environment)
    assert episode.stop_reason is StopReason.DONE and generator.requests == []
    assert environment.calls == ["open", "reset", "close"]
    trajectory = to_trajectory(episode)
    assert trajectory.total_reward == 1.0 and trajectory.outcome == "win"
    assert set(trajectory.loss_mask) == {0} and set(trajectory.token_rewards) == {0.0}


def test_an_action_cut_by_the_turn_budget_is_stepped_where_cut_actions_are_accepted():
    environment = CutActionsAccepted(outcomes=[StepOutcome(observation="judged"),
                                               StepOutcome(reward=1.0, done=True)])
    episode, _, environment = play_scripted([([5, 6], FinishReason.LENGTH), ([7, EOS], FinishReason.STOP)],
                                            environment=environment, max_new_tokens=2)
    assert episode.stop_reason is StopReason.DONE and environment.actions == ["5 6", "7"]
    assert episode.token_ids[5:8] == [0, 21, 22]  # the observation closes the cut action itself
    # with END_EPISODE, a cut by the context (or total) limit ends the episode there, unstepped
    end_episode = TruncatedActions.END_EPISODE
    environment = CutActionsAccepted(outcomes=[StepOutcome(done=True)])
    episode, _, environment = play_scripted([([5, 6], FinishReason.LENGTH)], environment=environment,
                                            context=5, max_new_tokens=2,
                                            limits=EpisodeLimits(truncated_actions=end_episode))
    assert episode.stop_reason is StopReason.CONTEXT_LENGTH and environment.actions == []
    episode, _, _ = play_scripted([([5, 6, 7], FinishReason.LENGTH)], environment=CutActionsAccepted(),
                                  limits=EpisodeLimits(max_total_tokens=6, truncated_actions=end_episode))
    assert episode.stop_reason is StopReason.MAX_TOTAL_TOKENS
