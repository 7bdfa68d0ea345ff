"""The agent loop's `ChatRenderer` over a tokenizer and `opentinker_runtime.ml.chat`.

An observation turn is "<|im_end|>\\n<|im_start|>user\\n{text}<|im_end|>\\n<|im_start|>assistant\\n".
When the sampled action already ends with <|im_end|> (the model stopped on eos), that token
closes the assistant turn and is not repeated: the observation starts at the "\\n" after it.
An action cut off without eos is closed by the observation's own <|im_end|>.

Opening prompts repeat: every episode of a group (and every group of a problem across steps)
renders the same messages. The renderer keeps the last `CACHED_PROMPTS` renderings (tokens and
their text) so a group renders and tokenizes its prompt once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

from opentinker_runtime.ml.chat import render_observation_turn, render_prompt


CACHED_PROMPTS = 512


class TokenizerRenderer:
    def __init__(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer
        self._turn_end = getattr(tokenizer, "eos_token_id", None)
        self._prompts: OrderedDict[Hashable, tuple[int, ...]] = OrderedDict()
        self._texts: OrderedDict[tuple[int, ...], str] = OrderedDict()

    def prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        key = _messages_key(messages)
        if key is None:
            return list(render_prompt(self.tokenizer, list(messages)))
        ids = _cached(self._prompts, key, lambda: tuple(render_prompt(self.tokenizer, list(messages))))
        return list(ids)

    def observation(self, text: str, action_ids: Sequence[int]) -> list[int]:
        closed = bool(action_ids) and action_ids[-1] == self._turn_end
        return list(render_observation_turn(self.tokenizer, text, action_closed=closed))

    def action_text(self, action_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(action_ids), skip_special_tokens=True)

    def decode(self, token_ids: Sequence[int]) -> str:
        key = tuple(token_ids)
        return _cached(self._texts, key,
                       lambda: self.tokenizer.decode(list(token_ids), skip_special_tokens=False))


def _messages_key(messages: Sequence[dict[str, str]]) -> Hashable | None:
    """A hashable copy of the messages, or None when a value is not hashable (not cached)."""
    try:
        key = tuple(tuple(sorted(message.items())) for message in messages)
        hash(key)
    except TypeError:
        return None
    return key


def _cached(cache: OrderedDict, key: Hashable, compute):  # noqa: ANN001, ANN202
    """cache[key], computed on a miss; the least recently used entry goes past CACHED_PROMPTS."""
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = cache[key] = compute()
    if len(cache) > CACHED_PROMPTS:
        cache.popitem(last=False)
    return value
