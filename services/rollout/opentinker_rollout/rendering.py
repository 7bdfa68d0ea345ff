"""The agent loop's `ChatRenderer` over a tokenizer and `opentinker.ml.chat`.

An observation turn is "<|im_end|>\\n<|im_start|>user\\n{text}<|im_end|>\\n<|im_start|>assistant\\n".
When the sampled action already ends with <|im_end|> (the model stopped on eos), that token
closes the assistant turn and is not repeated: the observation starts at the "\\n" after it.
An action cut off without eos is closed by the observation's own <|im_end|>.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentinker.ml.chat import render_observation_turn, render_prompt


class TokenizerRenderer:
    def __init__(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer
        self._turn_end = getattr(tokenizer, "eos_token_id", None)

    def prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return list(render_prompt(self.tokenizer, list(messages)))

    def observation(self, text: str, action_ids: Sequence[int]) -> list[int]:
        closed = bool(action_ids) and action_ids[-1] == self._turn_end
        return list(render_observation_turn(self.tokenizer, text, action_closed=closed))

    def action_text(self, action_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(action_ids), skip_special_tokens=True)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)
