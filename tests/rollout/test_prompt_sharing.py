"""Each distinct prompt is computed once: the rows of one prompt (a GRPO group, n samples) share
its prefill, a row joining while another holds its prompt copies that prompt's KV, and every row
still decodes exactly what it would alone; after a weight update the prompt is computed again."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from opentinker_runtime.ml.models import add_lora_adapter, apply_lora, load_model
from opentinker_runtime.ml.sources import ModelSource
from opentinker_rollout.decode_batch import DecodeBatch
from opentinker_rollout.engine import GenerationRequest, SamplingConfig
from opentinker_rollout.transformers_engine import TransformersEngine
from tests.rollout._generation import drive, prompts
from tests.rollout._policies import LORA
from tests.rollout._support import MODEL_NAME, tiny_engine


def request(prompt, **sampling) -> GenerationRequest:
    return GenerationRequest(prompt_ids=prompt, sampling=SamplingConfig(**sampling))


def recording(engine: TransformersEngine) -> list[tuple[int, int]]:
    """Record the [rows, tokens] of every forward the engine runs."""
    shapes: list[tuple[int, int]] = []
    forward = engine._forward

    def recorded(input_ids, *args, **kwargs):
        shapes.append(tuple(input_ids.shape))
        return forward(input_ids, *args, **kwargs)

    engine._forward = recorded
    engine._running = engine._decode_batch()  # the running batch calls the recording forward
    return shapes


def prefills(shapes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [shape for shape in shapes if shape[1] > 1]


def alone(req: GenerationRequest, seed: int = 0):
    return tiny_engine(seed, eos_token_ids=()).generate([req])[0]


def assert_same(got, want) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_the_rows_of_one_prompt_share_one_prefill_and_decode_what_they_would_alone():
    engine = tiny_engine(eos_token_ids=())
    shapes = recording(engine)
    group = [request(prompts()[1], max_new_tokens=8, temperature=1.0, seed=10 + i) for i in range(4)]
    other = request(prompts()[2], max_new_tokens=8, temperature=1.0, seed=3, n=3)
    answers = engine.generate([*group, other])
    assert prefills(shapes) == [(2, max(len(prompts()[1]), len(prompts()[2])))]  # 7 rows, 2 prompts
    for req, got in zip([*group, other], answers, strict=True):
        assert_same(got, alone(req))


def test_a_row_joining_a_prompt_that_a_running_row_holds_is_not_prefilled_again():
    engine = tiny_engine(eos_token_ids=())
    shapes = recording(engine)
    first = request(prompts()[3], max_new_tokens=12, temperature=1.0, seed=5)
    later = request(prompts()[3], max_new_tokens=6, temperature=1.0, seed=6, n=2)
    fresh = request(prompts()[0], max_new_tokens=6, temperature=1.0, seed=7)
    answers = drive(engine, {0: [("first", first)], 4: [("later", later), ("fresh", fresh)]})
    assert prefills(shapes) == [(1, len(prompts()[3])), (1, len(prompts()[0]))]
    for key, req in (("first", first), ("later", later), ("fresh", fresh)):
        assert_same(answers[key], alone(req))


def test_after_a_weight_update_between_steps_a_held_prompt_is_computed_again():
    """The row from before the update keeps its old prompt KV; rows after it share the new one."""
    model = load_model(ModelSource.builtin(MODEL_NAME, 0))  # our own copy: the weights change
    engine = TransformersEngine(model.model, model.tokenizer, eos_token_ids=())
    shapes = recording(engine)
    first = request(prompts()[1], max_new_tokens=12, temperature=1.0, seed=1)
    later = request(prompts()[1], max_new_tokens=8, temperature=1.0, seed=2)
    latest = request(prompts()[1], max_new_tokens=4, temperature=1.0, seed=3)
    engine.advance([("first", first)])
    engine.advance([])
    with torch.no_grad():
        for parameter in model.model.parameters():
            parameter.mul_(1.5)
    answers = drive(engine, {0: [("later", later)], 2: [("latest", latest)]})
    assert prefills(shapes) == [(1, len(prompts()[1]))] * 2  # first; later (latest copies later's)
    updated = TransformersEngine(model.model, model.tokenizer, eos_token_ids=())
    assert_same(answers["later"], updated.generate([later])[0])
    assert_same(answers["latest"], updated.generate([latest])[0])


@dataclass(kw_only=True)
class FakeRow:
    prompt_ids: tuple[int, ...]
    adapter: str = ""
    finished: bool = False


def test_rows_of_one_prompt_on_different_adapters_are_computed_apart():
    adapters_per_forward: list[list[str]] = []

    def forward(input_ids, attention, positions, cache, rows):
        adapters_per_forward.append([row.adapter for row in rows])
        rows_, tokens = input_ids.shape
        for layer in range(2):
            cache.update(torch.zeros(rows_, 1, tokens, 4), torch.zeros(rows_, 1, tokens, 4), layer)
        return torch.zeros(rows_, 8)

    batch = DecodeBatch(forward, lambda rows, logits: torch.zeros(len(rows), dtype=torch.long), 0,
                        weights_version=lambda: "v1")
    batch.advance([FakeRow(prompt_ids=(1, 2, 3), adapter="a"), FakeRow(prompt_ids=(1, 2, 3), adapter="b"),
                   FakeRow(prompt_ids=(1, 2, 3), adapter="a")])
    batch.advance([FakeRow(prompt_ids=(1, 2, 3), adapter="b"), FakeRow(prompt_ids=(1, 2, 3), adapter="c")])
    # prefill a and b; decode the 3 rows; b is held by a running row, c is prefilled
    assert adapters_per_forward == [["a", "b"], ["a", "b", "a"], ["c"]]


def test_an_adapter_added_later_and_updated_between_steps_is_computed_again():
    """The engine notices new parameters (an adapter added after it first looked at the model)
    and their in-place updates: a held prompt of that adapter is not reused across an update."""
    loaded = load_model(ModelSource.builtin(MODEL_NAME, 0))
    model = apply_lora(loaded.model, LORA, adapter_name="first")
    engine = TransformersEngine(model, loaded.tokenizer, eos_token_ids=())
    shapes = recording(engine)
    engine.generate([request(prompts()[0], max_new_tokens=2, temperature=0.0)])  # the engine looks at the model
    add_lora_adapter(model, LORA, "second")
    model.eval()
    held = GenerationRequest(prompt_ids=prompts()[1], adapter="second",
                             sampling=SamplingConfig(max_new_tokens=10, temperature=1.0, seed=1))
    after = GenerationRequest(prompt_ids=prompts()[1], adapter="second",
                              sampling=SamplingConfig(max_new_tokens=4, temperature=1.0, seed=2))
    engine.advance([("held", held)])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".second." in name:
                parameter.add_(0.05)
    answers = drive(engine, {0: [("after", after)]})
    assert len(prefills(shapes)) == 3  # the warm-up, held, and after again (not copied from held)
    updated = TransformersEngine(model, loaded.tokenizer, eos_token_ids=())
    assert_same(answers["after"], updated.generate([after])[0])
