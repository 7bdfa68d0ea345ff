"""The byte-level tokenizer: byte ids, atomic specials, ChatML template, save/load offline."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from opentinker_runtime.ml.tokenizer import VOCAB_SIZE, build_byte_tokenizer

TEXTS = ["", "hello world", "12+30=?\n  indented\ttab", "héllo wörld ☃ 数学 🎲", "<|im_end",
         "\x00\x7f"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_byte_tokenizer()


@pytest.mark.parametrize("text", TEXTS)
def test_token_ids_are_utf8_bytes_and_round_trip(tokenizer, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids == list(text.encode("utf-8"))
    assert tokenizer.decode(ids) == text


def test_specials_are_single_tokens_after_the_bytes(tokenizer) -> None:
    assert len(tokenizer) == VOCAB_SIZE == 260
    specials = ("<|pad|>", "<|bos|>", "<|im_start|>", "<|im_end|>")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    assert ids == {"<|pad|>": 256, "<|bos|>": 257, "<|im_start|>": 258, "<|im_end|>": 259}
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (256, 257, 259)
    assert tokenizer.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False) == \
        [258, *b"user\nhi", 259]
    assert tokenizer.encode("hi", add_special_tokens=True) == [104, 105]  # no bos/eos added


def test_chatml_template_golden(tokenizer) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"},
                {"role": "assistant", "content": "2"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n"
        "<|im_start|>assistant\n2<|im_end|>\n")
    assert tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True) \
        .endswith("1+1?<|im_end|>\n<|im_start|>assistant\n")


def test_build_is_deterministic_and_saves_a_directory_autotokenizer_loads(tokenizer, tmp_path) -> None:
    assert build_byte_tokenizer().get_vocab() == tokenizer.get_vocab()
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = TEXTS[3]
    assert loaded.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    assert loaded.chat_template == tokenizer.chat_template
    assert (loaded.eos_token, loaded.pad_token) == ("<|im_end|>", "<|pad|>")
