"""The agent-loop FSM with a scripted generator, renderer and environment: exact token
sequences, masks, logprobs, turn spans and a stop reason for every limit."""

from __future__ import annotations

import asyncio

from opentinker_rollout.engine import FinishReason, SamplingConfig
from opentinker_rollout.environment import StepOutcome
from opentinker_rollout.episode import (
    AgentState,
    Episode,
    EpisodeLimits,
    StopReason,
    TruncatedActions,
    to_trajectory,
)
from opentinker_rollout.fsm import AgentLoop, AgentLoopConfig
from tests.rollout._support import (
    EOS,
    ScriptedEnvironment,
    ScriptedGenerator,
    ScriptedRenderer,
)
from tests.rollout._agent_loop import OBSERVATION, PROMPT, play

STOP, LENGTH = FinishReason.STOP, FinishReason.LENGTH
END_EPISODE = TruncatedActions.END_EPISODE


def test_single_turn_done_masks_prompt_and_keeps_sampled_tokens():
    episode, generator, environment = play([([5, 6, EOS], STOP)],
                                           [StepOutcome(observation="right", reward=1.0, done=True)])
    assert episode.token_ids == [11, 12, 13, 5, 6, EOS]
    assert episode.loss_mask == [0, 0, 0, 1, 1, 1]
    assert episode.sampling_logprobs == [0, 0, 0, -0.5, -0.5, -0.5]
    assert episode.stop_reason is StopReason.DONE
    assert episode.prompt_length == 3
    assert environment.actions == ["5 6"]
    assert environment.calls == ["open", "reset", "step", "close"]
    assert generator.requests[0].prompt_ids == (11, 12, 13)
    turn = episode.turns[0]
    assert (turn.action_start, turn.action_end) == (3, 6)
    assert (turn.observation_start, turn.observation_end) == (6, 6)  # final observation: text only
    assert turn.observation_text == "right" and turn.reward == 1.0


def test_two_turns_interleave_observation_tokens_with_mask_0():
    episode, generator, _ = play(
        [([5, 6, EOS], STOP), ([7, EOS], STOP)],
        [StepOutcome(observation="again", reward=0.25), StepOutcome(reward=1.0, done=True)])
    assert episode.loss_mask == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    assert episode.token_ids == [11, 12, 13, 5, 6, EOS, 21, 22, 7, EOS]
    assert episode.sampling_logprobs == [0, 0, 0, -0.5, -0.5, -0.5, 0, 0, -0.5, -0.5]
    assert generator.requests[1].prompt_ids == (11, 12, 13, 5, 6, EOS, 21, 22)
    first, second = episode.turns
    assert (first.observation_start, first.observation_end) == (6, 8)
    assert (second.action_start, second.action_end) == (8, 10)
    trajectory = to_trajectory(episode)
    assert trajectory.total_reward == 1.25
    # reward attribution: each turn's reward on its last sampled token, the terminal one last
    assert trajectory.token_rewards == (0, 0, 0, 0, 0, 0.25, 0, 0, 0, 1.0)
    assert episode.stop_reason is StopReason.DONE


def test_a_turn_that_sampled_nothing_passes_its_reward_to_the_latest_sampled_token():
    from opentinker_rollout.episode import Turn, token_rewards
    turns = [Turn(turn_index=0, action_start=1, action_end=3, action_text="ab", policy_version=0, reward=0.5),
             Turn(turn_index=1, action_start=4, action_end=4, action_text="", policy_version=0, reward=2.0)]
    assert token_rewards(turns, [0, 1, 1, 0]) == (0, 0, 2.5, 0)
    assert token_rewards([turns[1]], [0, 0, 0, 0]) == (0, 0, 0, 0)  # nothing sampled: nowhere to put it


def test_the_prompt_follows_the_prompt_rule():
    generator = ScriptedGenerator([([EOS], STOP)])
    renderer = ScriptedRenderer(PROMPT, OBSERVATION)
    environment = ScriptedEnvironment(outcomes=[StepOutcome(done=True)])
    config = AgentLoopConfig(sampling=SamplingConfig(), limits=EpisodeLimits(), max_context_length=64)
    loop = AgentLoop(generator=generator, renderer=renderer, environment=environment, config=config)
    episode = asyncio.run(loop.run(Episode(group_id="g", episode_index=0)))
    renderer_messages = renderer.messages[0]
    assert renderer_messages == [{"role": "system", "content": "sys"},
                                 {"role": "user", "content": "hi\n\nobs"}]
    assert episode.prompt_text == "11 12 13"


def test_with_end_episode_an_action_cut_by_the_turn_limit_ends_without_an_environment_step():
    episode, generator, environment = play(
        [([5, 6, 7, 8], LENGTH)],
        limits=EpisodeLimits(max_new_tokens_per_turn=4, truncated_actions=END_EPISODE, truncation_penalty=-0.5))
    assert generator.requests[0].sampling.max_new_tokens == 4
    assert episode.stop_reason is StopReason.MAX_TURN_TOKENS
    assert episode.loss_mask == [0, 0, 0, 1, 1, 1, 1]
    assert "step" not in environment.calls and environment.calls[-1] == "close"
    assert episode.turns[0].truncated and episode.turns[0].reward == -0.5  # the penalty alone


def test_by_default_the_game_judges_a_cut_action_and_the_episode_goes_on():
    episode, generator, environment = play(
        [([5, 6, 7, 8], LENGTH), ([9, EOS], STOP)],
        [StepOutcome(observation="too long", reward=-1.0), StepOutcome(reward=1.0, done=True)],
        limits=EpisodeLimits(max_new_tokens_per_turn=4))
    assert environment.actions == ["5 6 7 8", "9"] and environment.truncated == [True, False]
    assert episode.stop_reason is StopReason.DONE
    assert [t.truncated for t in episode.turns] == [True, False]
    assert [t.reward for t in episode.turns] == [-1.0, 1.0]
    assert episode.token_ids == [11, 12, 13, 5, 6, 7, 8, 0, 21, 22, 9, EOS]  # the cut turn is closed
    assert to_trajectory(episode).total_reward == 0.0


def test_the_truncation_penalty_adds_to_the_games_verdict():
    episode, _, _ = play([([5, 6], LENGTH)], [StepOutcome(reward=0.25, done=True)],
                         limits=EpisodeLimits(max_new_tokens_per_turn=2, truncation_penalty=-1.0))
    assert episode.turns[0].reward == -0.75 and episode.stop_reason is StopReason.DONE


def test_a_cut_by_the_total_limit_is_judged_then_ends_with_that_limit():
    episode, _, environment = play([([5, 6, 7, 8, 9], LENGTH)], [StepOutcome(observation="go on", reward=-1.0)],
                                   limits=EpisodeLimits(max_total_tokens=8))
    assert environment.truncated == [True]
    assert episode.stop_reason is StopReason.MAX_TOTAL_TOKENS
    assert episode.turns[0].reward == -1.0 and episode.turns[0].observation_text == "go on"
    assert len(episode.token_ids) == 8


def test_with_end_episode_a_match_still_judges_a_cut_by_the_turn_budget_but_not_by_the_context():
    class Match(ScriptedEnvironment):
        accepts_truncated_actions = True

    limits = EpisodeLimits(max_new_tokens_per_turn=2, truncated_actions=END_EPISODE)
    _, _, judged = play([([5, 6], LENGTH)], [StepOutcome(done=True)], limits=limits,
                        environment=Match(outcomes=[StepOutcome(done=True)]))
    assert judged.truncated == [True]
    episode, _, unjudged = play([([5], FinishReason.CONTEXT)], limits=limits, environment=Match())
    assert "step" not in unjudged.calls and episode.stop_reason is StopReason.CONTEXT_LENGTH


def test_max_turns_stops_after_the_step_without_appending_the_observation():
    episode, _, _ = play([([5, EOS], STOP)], [StepOutcome(observation="more", reward=0.5)],
                         limits=EpisodeLimits(max_turns=1))
    assert episode.stop_reason is StopReason.MAX_TURNS
    assert episode.loss_mask == [0, 0, 0, 1, 1]
    assert episode.turns[0].reward == 0.5 and episode.turns[0].observation_text == "more"


def test_max_total_tokens_caps_the_generation_budget():
    episode, generator, _ = play([([5, 6, 7, 8, 9], LENGTH)],
                                 limits=EpisodeLimits(max_total_tokens=8, truncated_actions=END_EPISODE))
    assert generator.requests[0].sampling.max_new_tokens == 5  # 8 - 3 prompt tokens
    assert episode.stop_reason is StopReason.MAX_TOTAL_TOKENS
    assert len(episode.token_ids) == 8


def test_an_observation_that_does_not_fit_ends_the_episode():
    episode, generator, _ = play([([5, EOS], STOP)], [StepOutcome(observation="long")],
                                 limits=EpisodeLimits(max_total_tokens=7))
    assert episode.stop_reason is StopReason.MAX_TOTAL_TOKENS
    assert episode.token_ids == [11, 12, 13, 5, EOS]  # 5 + 2 observation tokens leave no room
    assert len(generator.requests) == 1


def test_the_context_window_caps_generation_with_its_own_reason():
    episode, generator, _ = play([([5, 6, 7, 8], LENGTH)], [StepOutcome()], context=7, max_new_tokens=16)
    assert generator.requests[0].sampling.max_new_tokens == 4
    assert episode.stop_reason is StopReason.CONTEXT_LENGTH


def test_an_engine_that_reports_a_full_context_ends_with_context_length():
    # the per-turn limit (4) is the tighter budget here, so only the engine's CONTEXT answer
    # (its own window may be smaller than the one the loop was told) can give CONTEXT_LENGTH
    episode, _, environment = play([([5, 6], FinishReason.CONTEXT)], context=512,
                                   limits=EpisodeLimits(max_new_tokens_per_turn=4, truncated_actions=END_EPISODE))
    assert episode.stop_reason is StopReason.CONTEXT_LENGTH
    assert episode.token_ids == [11, 12, 13, 5, 6] and episode.loss_mask == [0, 0, 0, 1, 1]
    assert "step" not in environment.calls


def test_a_prompt_that_fills_the_context_never_generates():
    episode, generator, _ = play([], context=3)
    assert episode.stop_reason is StopReason.CONTEXT_LENGTH
    assert generator.requests == [] and episode.loss_mask == [0, 0, 0]


def test_an_unclosed_action_gets_the_closing_token_in_the_observation():
    episode, _, _ = play([([5, 6], STOP), ([EOS], STOP)],
                         [StepOutcome(observation="x"), StepOutcome(done=True)])
    assert episode.loss_mask == [0, 0, 0, 1, 1, 0, 0, 0, 1]
    assert episode.token_ids[5:8] == [0, 21, 22]


def test_the_episode_timeout_stops_a_hanging_environment_fails_the_episode_and_closes_it():
    """Time that ran out while the game was answering is the game's failure: ENV_ERROR (never
    trained on), not a TIMEOUT the policy would be blamed for."""
    environment = ScriptedEnvironment(outcomes=[StepOutcome(done=True)], step_delay_s=5.0)
    episode, _, environment = play([([5, EOS], STOP)], environment=environment,
                                   limits=EpisodeLimits(timeout_s=0.05))
    assert episode.stop_reason is StopReason.ENV_ERROR
    assert "did not answer within the episode's time limit (0.05 s, INTERACTING)" in episode.env_error
    assert episode.loss_mask == [0, 0, 0, 1, 1]
    assert environment.calls[-1] == "close"


class SlowGenerator(ScriptedGenerator):
    async def generate(self, request):  # noqa: ANN001, ANN201
        await asyncio.sleep(5.0)
        return await super().generate(request)


def test_the_episode_timeout_while_the_policy_generates_is_a_timeout():
    episode, _, _ = play([([5, EOS], STOP)], generator=SlowGenerator([([5, EOS], STOP)]),
                         limits=EpisodeLimits(timeout_s=0.05))
    assert episode.stop_reason is StopReason.TIMEOUT and not episode.env_error


def test_an_environment_failure_mid_episode_is_env_error_with_its_message():
    environment = ScriptedEnvironment(fail_on="step")
    episode, _, environment = play([([5, EOS], STOP)], environment=environment)
    assert episode.stop_reason is StopReason.ENV_ERROR
    assert episode.env_error == "step failed on purpose"
    assert episode.env_traceback == "Traceback: boom"
    assert environment.calls[-1] == "close"


def test_an_environment_that_cannot_open_is_env_error_with_no_tokens():
    episode, generator, _ = play([], environment=ScriptedEnvironment(fail_on="open"))
    assert episode.stop_reason is StopReason.ENV_ERROR
    assert episode.token_ids == [] and generator.requests == []


def test_turns_record_the_policy_version_that_sampled_them():
    episode, _, _ = play([([5, EOS], STOP)], [StepOutcome(done=True)], version=7)
    trajectory = to_trajectory(episode)
    assert episode.turns[0].policy_version == 7 and trajectory.policy_version == 7


def test_handlers_are_one_per_non_terminal_state():
    loop = AgentLoop(generator=ScriptedGenerator([]), renderer=ScriptedRenderer([], []),
                     environment=ScriptedEnvironment(),
                     config=AgentLoopConfig(sampling=SamplingConfig(), limits=EpisodeLimits(),
                                            max_context_length=8))
    assert set(loop.handlers) == {AgentState.PENDING, AgentState.GENERATING, AgentState.INTERACTING}


def test_generating_returns_interacting_after_a_stop_token():
    generator = ScriptedGenerator([([5, EOS], STOP)])
    loop = AgentLoop(generator=generator, renderer=ScriptedRenderer(PROMPT, OBSERVATION),
                     environment=ScriptedEnvironment(),
                     config=AgentLoopConfig(sampling=SamplingConfig(), limits=EpisodeLimits(),
                                            max_context_length=64))
    episode = Episode(group_id="g", episode_index=0)
    episode.append_context(PROMPT)
    assert asyncio.run(loop.generating(episode)) is AgentState.INTERACTING
    assert episode.loss_mask == [0, 0, 0, 1, 1]


def test_the_smaller_of_the_turn_limit_and_max_new_tokens_applies():
    _, generator, _ = play([([5], LENGTH)], [StepOutcome(done=True)], limits=EpisodeLimits(max_new_tokens_per_turn=9),
                           max_new_tokens=6)
    assert generator.requests[0].sampling.max_new_tokens == 6
