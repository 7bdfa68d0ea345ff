"""The renderer renders and tokenizes a repeated prompt once, and never mixes two prompts up."""

from __future__ import annotations

from opentinker_runtime.ml.chat import render_prompt
from opentinker_runtime.ml.tokenizer import build_byte_tokenizer
from opentinker_rollout import rendering
from opentinker_rollout.rendering import TokenizerRenderer


class CountingTokenizer:
    """The project's tokenizer, counting the chat renderings and decodes asked of it."""

    def __init__(self) -> None:
        self.inner = build_byte_tokenizer()
        self.encodes = 0
        self.decodes = 0

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.inner, name)

    def apply_chat_template(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        self.encodes += 1
        return self.inner.apply_chat_template(*args, **kwargs)

    def decode(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        self.decodes += 1
        return self.inner.decode(*args, **kwargs)


def _messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": question}]


def test_a_group_renders_its_prompt_once_and_each_copy_is_its_own_list() -> None:
    tokenizer = CountingTokenizer()
    renderer = TokenizerRenderer(tokenizer)
    copies = [renderer.prompt(_messages("1 + 1?")) for _ in range(8)]
    texts = [renderer.decode(ids) for ids in copies]
    assert copies[0] == render_prompt(tokenizer.inner, _messages("1 + 1?"))
    assert all(c == copies[0] for c in copies) and len({id(c) for c in copies}) == 8
    assert len(set(texts)) == 1 and texts[0] == tokenizer.inner.decode(copies[0], skip_special_tokens=False)
    assert tokenizer.encodes == 1 and tokenizer.decodes == 1
    copies[0].append(7)  # a caller that extends its copy does not change the others'
    assert renderer.prompt(_messages("1 + 1?")) == copies[1]


def test_different_prompts_get_their_own_tokens_and_the_cache_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(rendering, "CACHED_PROMPTS", 4)
    tokenizer = build_byte_tokenizer()
    renderer = TokenizerRenderer(tokenizer)
    questions = [f"{i} + {i}?" for i in range(10)]
    for question in questions:
        assert renderer.prompt(_messages(question)) == render_prompt(tokenizer, _messages(question))
    assert len(renderer._prompts) == 4
    assert renderer.prompt(_messages(questions[0])) == render_prompt(tokenizer, _messages(questions[0]))


def test_messages_with_unhashable_values_are_rendered_without_the_cache() -> None:
    tokenizer = build_byte_tokenizer()
    renderer = TokenizerRenderer(tokenizer)
    messages = [{"role": "user", "content": "hi", "extra": ["a"]}]  # type: ignore[dict-item]
    assert renderer.prompt(messages) == render_prompt(tokenizer, messages)
    assert not renderer._prompts
