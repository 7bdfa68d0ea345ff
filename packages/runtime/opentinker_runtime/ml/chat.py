"""Chat rendering through the tokenizer's own chat template (ChatML for the builtin models).

Text is rendered with `apply_chat_template(..., tokenize=False)` and split at message
boundaries; each piece is tokenized on its own (no special tokens added), so the tokens of a
prompt, an SFT example and an observation turn concatenate exactly. For the byte-level
tokenizer this equals tokenizing the whole text; for BPE tokenizers pieces meet at special
tokens, where merges do not cross.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from transformers import PreTrainedTokenizerBase

Message = Mapping[str, str]
_PLACEHOLDER = "\x00OPENTINKER-ACTION\x00"


def render_text(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message], *,
                add_generation_prompt: bool = False) -> str:
    """The chat template's text for `messages` (empty list = empty text)."""
    if not messages and not add_generation_prompt:
        return ""
    return tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of `text` with no bos/eos added by the tokenizer."""
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def render_prompt(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message]) -> list[int]:
    """Tokens of `messages` followed by the generation prompt ("<|im_start|>assistant\\n")."""
    return encode(tokenizer, render_text(tokenizer, messages, add_generation_prompt=True))


def render_sft_example(tokenizer: PreTrainedTokenizerBase,
                       messages: Sequence[Message]) -> tuple[list[int], list[int]]:
    """(tokens, loss_mask) of a whole conversation: mask 1 on every assistant message's
    content and its closing eos (<|im_end|>), 0 on everything else (headers, newlines,
    system and user turns)."""
    tokens: list[int] = []
    mask: list[int] = []
    for index, message in enumerate(messages):
        for text, trained in _message_pieces(tokenizer, messages, index):
            piece = encode(tokenizer, text)
            tokens += piece
            mask += [int(trained)] * len(piece)
    return tokens, mask


def _message_pieces(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message],
                    index: int) -> list[tuple[str, bool]]:
    """The text message `index` adds to the rendering, as (text, trained) pieces."""
    before = render_text(tokenizer, messages[:index])
    after = render_text(tokenizer, messages[:index + 1])
    if messages[index]["role"] != "assistant":
        return [(after[len(before):], False)]
    header = render_text(tokenizer, messages[:index], add_generation_prompt=True)[len(before):]
    body = after[len(before) + len(header):]
    end = _trained_end(body, tokenizer.eos_token)
    return [(header, False), (body[:end], True), (body[end:], False)]


def _trained_end(body: str, eos_token: str | None) -> int:
    """Index just past the last eos in an assistant message's text (all of it if none)."""
    position = body.rfind(eos_token) if eos_token else -1
    return len(body) if position < 0 else position + len(eos_token)


def render_observation_turn(tokenizer: PreTrainedTokenizerBase, text: str, *,
                            action_closed: bool = False) -> list[int]:
    """Tokens that close the assistant turn, add a user turn with `text` and open the next
    assistant turn: "<|im_end|>\\n<|im_start|>user\\n{text}<|im_end|>\\n<|im_start|>assistant\\n".

    When the sampled action already ended with the eos (<|im_end|>), pass action_closed=True:
    the leading eos is then left out, so it is not repeated. A turn cut off by a length limit
    has no eos and needs the full form.
    """
    conversation = [{"role": "assistant", "content": _PLACEHOLDER}, {"role": "user", "content": text}]
    rendered = render_text(tokenizer, conversation, add_generation_prompt=True)
    suffix = rendered[rendered.index(_PLACEHOLDER) + len(_PLACEHOLDER):]
    eos = tokenizer.eos_token or ""
    if action_closed and eos and suffix.startswith(eos):
        suffix = suffix[len(eos):]
    return encode(tokenizer, suffix)
