"""Chat rendering: prompts and SFT examples match apply_chat_template; exact SFT masks;
observation turns splice into a conversation exactly."""

from __future__ import annotations

import pytest

from opentinker_runtime.ml.chat import encode, render_observation_turn, render_prompt, render_sft_example
from opentinker_runtime.ml.tokenizer import build_byte_tokenizer

SYSTEM = {"role": "system", "content": "S"}
USER = {"role": "user", "content": "Q?"}


@pytest.fixture(scope="module")
def tokenizer():
    return build_byte_tokenizer()


def template_ids(tokenizer, messages, generation_prompt=False) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, tokenize=True,
                                              add_generation_prompt=generation_prompt)["input_ids"])


def test_render_prompt_matches_the_template_with_generation_prompt(tokenizer) -> None:
    tokens = render_prompt(tokenizer, [SYSTEM, USER])
    assert tokens == template_ids(tokenizer, [SYSTEM, USER], generation_prompt=True)
    assert tokenizer.decode(tokens) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n")


def test_sft_example_masks_assistant_content_and_its_end_token_only(tokenizer) -> None:
    messages = [SYSTEM, USER, {"role": "assistant", "content": "AB"},
                {"role": "user", "content": "C"}, {"role": "assistant", "content": "D"}]
    tokens, mask = render_sft_example(tokenizer, messages)
    assert tokens == template_ids(tokenizer, messages)
    # "<|im_start|>system\nS<|im_end|>\n" = 11 tokens, "<|im_start|>user\nQ?<|im_end|>\n" = 10,
    # "<|im_start|>assistant\n" = 11; "\n" + "<|im_start|>user\nC<|im_end|>\n" + header = 1 + 9 + 11
    expected = [0] * 32 + [1, 1, 1] + [0] * 21 + [1, 1] + [0]
    assert mask == expected
    trained = [t for t, m in zip(tokens, mask) if m]
    assert tokenizer.decode(trained) == "AB<|im_end|>D<|im_end|>"


def test_sft_example_without_assistant_trains_nothing(tokenizer) -> None:
    tokens, mask = render_sft_example(tokenizer, [SYSTEM, USER])
    assert len(tokens) == len(mask) == 21 and set(mask) == {0}


def test_observation_turn_both_forms(tokenizer) -> None:
    full = render_observation_turn(tokenizer, "obs")
    closed = render_observation_turn(tokenizer, "obs", action_closed=True)
    assert tokenizer.decode(full) == "<|im_end|>\n<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n"
    assert closed == full[1:] and full[0] == tokenizer.eos_token_id


@pytest.mark.parametrize("action_closed", [False, True])
def test_prompt_action_and_observation_concatenate_to_the_conversation(tokenizer, action_closed) -> None:
    action = encode(tokenizer, "42") + ([tokenizer.eos_token_id] if action_closed else [])
    tokens = render_prompt(tokenizer, [SYSTEM, USER]) + action + \
        render_observation_turn(tokenizer, "wrong", action_closed=action_closed)
    conversation = [SYSTEM, USER, {"role": "assistant", "content": "42"},
                    {"role": "user", "content": "wrong"}]
    assert tokens == template_ids(tokenizer, conversation, generation_prompt=True)
