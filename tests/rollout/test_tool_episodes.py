"""Tool-call episodes of the math_tool game through the real agent loop and chat renderer:
the model's <calc> text reaches the calculator, its result is the next user turn, and
exact tokens, masks, turn spans and rewards come out; plus every way such an episode ends.

Expected tokens are written as literal ChatML text (what the tiny-llama template renders),
not produced by the renderer under test.
"""

from __future__ import annotations

from opentinker_runtime.games.math_tool_game import (
    DEFAULT_FORMAT_PENALTY,
    DEFAULT_SYSTEM_PROMPT,
    FORMAT_REMINDER,
    MathToolGame,
)
from opentinker_rollout.engine import FinishReason
from opentinker_rollout.episode import EpisodeLimits, StopReason, to_trajectory
from tests.rollout._games import action, encode, play
from tests.rollout._support import EOS

QUESTION, PRODUCT = "69*216=", str(69 * 216)  # MathToolGame(seed=0).reset(index=0) (asserted)
PROMPT = encode(f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n"
                f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
CALC = f"<calc>{QUESTION[:-1]}</calc>"
ANSWER = f"<answer>{PRODUCT}</answer>"


def observation(text: str) -> list[int]:
    """A user turn after an eos-closed action, and the next generation prompt."""
    return encode(f"\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")


def sampled(text: str) -> list[int]:
    return [*encode(text), EOS]


def play_problem_0(script, game=None, **kwargs):
    game = game or MathToolGame(seed=0)
    episode, generator, session = play(game, script, reset_kwargs={"index": 0}, **kwargs)
    assert episode.prompt_text.endswith(f"user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    return episode, generator, session


def test_a_calculator_call_is_answered_and_the_right_answer_scores_1():
    episode, _, session = play_problem_0([action(CALC), action(ANSWER)])
    first, second = episode.turns
    a1, obs, a2 = sampled(CALC), observation(f"= {PRODUCT}"), sampled(ANSWER)
    assert episode.token_ids == PROMPT + a1 + obs + a2
    assert episode.loss_mask == [0] * len(PROMPT) + [1] * len(a1) + [0] * len(obs) + [1] * len(a2)
    p, o = len(PROMPT), len(PROMPT) + len(a1)
    assert (first.action_start, first.action_end) == (p, o)
    assert (first.observation_start, first.observation_end) == (o, o + len(obs))
    assert (second.action_start, second.action_end) == (o + len(obs), len(episode.token_ids))
    assert second.observation_start == second.observation_end == len(episode.token_ids)
    assert session.actions == [CALC, ANSWER]
    assert session.calls == ["open", "reset", "step", "step", "close"]
    assert first.observation_text == f"= {PRODUCT}" and second.observation_text == ""
    assert (first.reward, second.reward) == (0.0, 1.0)
    assert second.info["correct"] is True and second.info["reason"] == "answer"
    assert episode.stop_reason is StopReason.DONE
    trajectory = to_trajectory(episode)
    assert trajectory.total_reward == 1.0
    assert trajectory.token_rewards == tuple([0.0] * (len(episode.token_ids) - 1) + [1.0])


def test_a_calculator_error_is_the_next_observation():
    script = [action("<calc>1/0</calc>"), action("<answer>0</answer>")]
    episode, generator, _ = play_problem_0(script)
    first = episode.turns[0]
    assert first.observation_text == "error: division by zero" and first.reward == 0.0
    obs = episode.token_ids[first.observation_start:first.observation_end]
    assert obs == observation("error: division by zero")
    assert generator.requests[1].prompt_ids == tuple(PROMPT + sampled("<calc>1/0</calc>") + obs)
    last = episode.turns[1]
    assert last.reward == 0.0 and last.info["correct"] is False and last.info["extracted"] == "0"
    assert episode.stop_reason is StopReason.DONE


def test_a_format_miss_is_penalised_on_the_last_token_of_its_turn():
    episode, _, _ = play_problem_0([action(PRODUCT), action(ANSWER)])
    first = episode.turns[0]
    assert first.observation_text == FORMAT_REMINDER
    assert first.reward == -DEFAULT_FORMAT_PENALTY
    rewards = to_trajectory(episode).token_rewards
    assert rewards[first.action_end - 1] == -DEFAULT_FORMAT_PENALTY  # the first turn's eos
    assert rewards[-1] == 1.0 and sum(r != 0 for r in rewards) == 2


def test_tool_calls_past_the_game_limit_end_the_episode_with_reward_0():
    game = MathToolGame(seed=0, max_tool_calls=1)
    script = [action(CALC), action("<calc>1+1</calc>"), action(ANSWER)]
    episode, generator, _ = play_problem_0(script, game=game)
    assert len(episode.turns) == 2 and len(generator.script) == 1  # the answer was never asked for
    last = episode.turns[1]
    assert last.info["reason"] == "tool_call_limit" and last.info["tool_calls"] == 2
    assert last.reward == 0.0 and episode.stop_reason is StopReason.DONE
    assert episode.token_ids == (PROMPT + sampled(CALC) + observation(f"= {PRODUCT}")
                                 + sampled("<calc>1+1</calc>"))


def test_the_loops_max_turns_cuts_a_tool_loop_the_game_would_continue():
    script = [action("<calc>1+1</calc>"), action("<calc>2+2</calc>"), action(ANSWER)]
    episode, generator, session = play_problem_0(script, limits=EpisodeLimits(max_turns=2))
    assert episode.stop_reason is StopReason.MAX_TURNS
    assert len(generator.script) == 1 and session.game.problem is not None  # game not over
    last = episode.turns[1]
    assert last.observation_text == "= 4"  # stepped, but the observation stays text only
    assert last.observation_start == last.observation_end == len(episode.token_ids)
    assert episode.token_ids == (PROMPT + sampled("<calc>1+1</calc>") + observation("= 2")
                                 + sampled("<calc>2+2</calc>"))
    assert session.calls[-1] == "close"


def test_the_games_own_turn_limit_ends_the_episode_as_done():
    game = MathToolGame(seed=0, max_turns=2)
    script = [action("<calc>1+1</calc>"), action("<calc>2+2</calc>"), action(ANSWER)]
    episode, _, _ = play_problem_0(script, game=game)
    assert episode.stop_reason is StopReason.DONE
    assert episode.turns[-1].info["reason"] == "turn_limit" and episode.turns[-1].reward == 0.0


def test_a_calculator_result_that_does_not_fit_the_context_ends_the_episode():
    fits = len(PROMPT) + len(sampled(CALC)) + len(observation(f"= {PRODUCT}"))
    full, _, _ = play_problem_0([action(CALC)], context=fits)
    assert full.stop_reason is StopReason.CONTEXT_LENGTH
    assert full.token_ids == PROMPT + sampled(CALC)  # no observation tokens were appended
    one_more, generator, _ = play_problem_0([action(CALC), ([EOS], FinishReason.LENGTH)],
                                            context=fits + 1)
    assert generator.requests[1].sampling.max_new_tokens == 1
    assert one_more.stop_reason is StopReason.CONTEXT_LENGTH and len(one_more.token_ids) == fits + 1


def test_a_game_that_rejects_its_reset_kwargs_is_an_env_error():
    episode, generator, session = play(MathToolGame(seed=0), [], reset_kwargs={"split": "test"})
    assert episode.stop_reason is StopReason.ENV_ERROR
    assert episode.env_error.startswith("GameConfigError: split")
    assert "Traceback" in episode.env_traceback
    assert episode.token_ids == [] and generator.requests == []
    assert session.calls == ["open", "reset", "close"]
