"""Chat-template golden test: whole math_tool episodes played through the real AgentLoop and
TokenizerRenderer equal the tokenizer's own chat template of the same conversation.

The conversation is rebuilt independently of the agent loop: the opening messages of the
prompt rule, then each action's text as an assistant message and the game's answer to it
(from a fresh copy of the game) as a user message. The final observation is text only in an
episode, so the template of the conversation up to the last assistant message is the
reference; the episode lacks only what the template adds after the last sampled token.
"""

from __future__ import annotations

import pytest

from opentinker_env.game import opening_messages
from opentinker_runtime.games.math_tool_game import MathToolGame
from opentinker_rollout.engine import FinishReason
from opentinker_rollout.episode import StopReason
from tests.rollout._games import SCRIPTED_LOGPROB, action, encode, play, tokenizer
from tests.rollout._support import EOS

INDEX = 0  # MathToolGame(seed=0) problem 0 of "train" is "69*216=" (asserted below)
ANSWER = str(69 * 216)
NEWLINE = encode("\n")

# Each script: (action text, ends with eos). Without eos = stopped on a stop string.
ALL_EOS = [("<calc>69*216</calc>", True), (f"<calc>{ANSWER}-4</calc>", True),
           (f"<answer>{ANSWER}</answer>", True)]
STOP_STRING_MID = [("<calc>12*34</calc>", False), ("<calc>69*216</calc>", True),
                   (f"<answer>{ANSWER}</answer>", True)]
NO_EOS_BEFORE_END = [("<calc>12*34</calc>", False), ("<calc>1/0</calc>", False),
                     ("what?", True), (f"<answer>{ANSWER}</answer>", True)]
CLOSED_AT_END = {"all_eos": ALL_EOS, "stop_string_mid": STOP_STRING_MID,
                 "no_eos_before_end": NO_EOS_BEFORE_END}
FINAL_OPEN = [*ALL_EOS[:2], (f"<answer>{ANSWER}</answer>", False)]


def template(messages, *, add_generation_prompt=False) -> list[int]:
    return list(tokenizer().apply_chat_template(
        messages, tokenize=True, add_generation_prompt=add_generation_prompt, return_dict=False))


def conversation(texts: list[str]) -> list[dict[str, str]]:
    """The chat messages of an episode whose actions are `texts`, per a fresh game."""
    game = MathToolGame(seed=0)
    question = game.reset(index=INDEX)
    assert question == "69*216="
    messages = opening_messages(game.get_system_prompt(), game.get_initial_user_message(), question)
    for number, text in enumerate(texts):
        messages.append({"role": "assistant", "content": text})
        result = game.step(text)
        assert result.done == (number == len(texts) - 1)
        if not result.done:
            messages.append({"role": "user", "content": result.observation})
    return messages


def play_script(script):
    episode, generator, _ = play(MathToolGame(seed=0), [action(t, eos=e) for t, e in script],
                                 reset_kwargs={"index": INDEX})
    assert episode.stop_reason is StopReason.DONE and episode.turns[-1].reward == 1.0
    return episode, generator, conversation([text for text, _ in script])


def action_spans(messages, script) -> list[tuple[int, int]]:
    """[start, end) of each sampled action in the template rendering: it starts right after
    the generation prompt that the template puts before that assistant message."""
    positions = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    spans = []
    for position, (text, eos) in zip(positions, script, strict=True):
        start = len(template(messages[:position], add_generation_prompt=True))
        spans.append((start, start + len(encode(text)) + int(eos)))
    return spans


@pytest.mark.parametrize("script", CLOSED_AT_END.values(), ids=CLOSED_AT_END.keys())
def test_episode_tokens_are_the_template_without_its_trailing_newline(script):
    episode, _, messages = play_script(script)
    assert len(episode.turns) == len(script) >= 3
    reference = template(messages)
    assert reference[-2:] == [EOS, *NEWLINE]  # the template ends turns with "<|im_end|>\n"
    assert episode.token_ids == reference[:-1]


def test_a_final_action_without_eos_leaves_the_last_turn_open():
    episode, _, messages = play_script(FINAL_OPEN)
    reference = template(messages)
    assert episode.token_ids == reference[:-2]
    assert episode.token_ids[-1] != EOS


def test_an_action_stopped_on_a_stop_string_is_closed_by_the_observation():
    episode, _, messages = play_script(STOP_STRING_MID)
    first = episode.turns[0]
    assert episode.token_ids[first.action_start:first.action_end] == encode("<calc>12*34</calc>")
    # the observation's first token is the <|im_end|> the action did not sample (mask 0)
    assert episode.token_ids[first.observation_start] == EOS
    assert episode.loss_mask[first.observation_start] == 0
    assert first.observation_text == "= 408"
    assert episode.token_ids == template(messages)[:-1]


@pytest.mark.parametrize("script", [*CLOSED_AT_END.values(), FINAL_OPEN],
                         ids=[*CLOSED_AT_END.keys(), "final_open"])
def test_loss_mask_and_logprobs_are_set_exactly_on_the_sampled_actions(script):
    episode, _, messages = play_script(script)
    spans = action_spans(messages, script)
    expected_mask = [int(any(start <= i < end for start, end in spans))
                     for i in range(len(episode.token_ids))]
    assert episode.loss_mask == expected_mask
    assert sum(expected_mask) == sum(len(encode(text)) + eos for text, eos in script)
    assert episode.sampling_logprobs == [SCRIPTED_LOGPROB if m else 0.0 for m in expected_mask]
    assert [(t.action_start, t.action_end) for t in episode.turns] == spans


def test_every_generation_request_is_the_template_of_the_conversation_so_far():
    episode, generator, messages = play_script(STOP_STRING_MID)
    user_turns = [i + 1 for i, m in enumerate(messages) if m["role"] == "user"]
    expected = [tuple(template(messages[:end], add_generation_prompt=True)) for end in user_turns]
    assert [request.prompt_ids for request in generator.requests] == expected
    assert episode.prompt_length == len(expected[0])
    assert episode.prompt_text == tokenizer().apply_chat_template(
        messages[:2], tokenize=False, add_generation_prompt=True)


def test_observation_spans_hold_exactly_the_next_user_turn():
    episode, _, messages = play_script(ALL_EOS)
    reference = template(messages)
    for turn, following in zip(episode.turns, episode.turns[1:]):
        # "\n<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n" after the eos
        assert turn.observation_end == following.action_start
        observation = reference[turn.observation_start:turn.observation_end]
        assert observation == encode(f"\n<|im_start|>user\n{turn.observation_text}<|im_end|>\n"
                                     "<|im_start|>assistant\n")
    last = episode.turns[-1]
    assert last.observation_start == last.observation_end == len(episode.token_ids)


def test_sampled_ids_are_kept_even_when_their_text_would_tokenize_differently():
    """A turn that ends mid-character (a lone UTF-8 lead byte) decodes to U+FFFD, whose
    re-encoding is three other bytes; the episode must keep the ids the policy sampled."""
    half_character = [*encode("<calc>2*3</calc> "), encode("é")[0], EOS]
    script = [(half_character, FinishReason.STOP), action("<answer>6</answer>")]
    episode, _, session = play(MathToolGame(seed=0), script, reset_kwargs={"index": INDEX})
    first = episode.turns[0]
    assert episode.token_ids[first.action_start:first.action_end] == half_character
    assert encode(first.action_text) + [EOS] != half_character  # re-tokenizing would differ
    assert session.actions[0] == first.action_text and first.observation_text == "= 6"
    assert episode.loss_mask[first.action_start:first.action_end] == [1] * len(half_character)
