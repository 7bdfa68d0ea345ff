"""token_logprobs: the index convention, temperature, masking and padding-side invariance."""

from __future__ import annotations

import pytest
import torch

from opentinker_runtime.ml.logprobs import entropy_from_logits, token_logprobs
from opentinker_runtime.ml.models import build_builtin


@pytest.fixture(scope="module")
def model():
    return build_builtin("tiny-qwen2", 0).eval()


def manual_logprobs(model, tokens: list[int], temperature: float) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0] / temperature
    logp = torch.log_softmax(logits, -1)
    return [0.0] + [float(logp[t - 1, tokens[t]]) for t in range(1, len(tokens))]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_index_t_is_log_p_of_token_t_given_the_prefix(model, temperature) -> None:
    tokens = [258, 117, 10, 50, 51, 259]
    with torch.no_grad():
        got = token_logprobs(model, torch.tensor([tokens]), torch.ones(1, 6), temperature)
    assert got[0, 0] == 0
    assert torch.allclose(got[0], torch.tensor(manual_logprobs(model, tokens, temperature)), atol=1e-5)


def test_left_and_right_padding_give_the_same_numbers(model) -> None:
    short, long = [65, 66, 67], [70, 71, 72, 73, 74]
    right = torch.tensor([short + [256, 256], long])
    right_mask = torch.tensor([[1, 1, 1, 0, 0], [1] * 5])
    left = torch.tensor([[256, 256] + short, long])
    left_mask = torch.tensor([[0, 0, 1, 1, 1], [1] * 5])
    with torch.no_grad():
        by_right = token_logprobs(model, right, right_mask)
        by_left = token_logprobs(model, left, left_mask)
    assert torch.allclose(by_right[0, :3], by_left[0, 2:], atol=1e-5)
    assert torch.all(by_right[0, 3:] == 0) and torch.all(by_left[0, :2] == 0)
    assert torch.allclose(by_right[0, :3], torch.tensor(manual_logprobs(model, short, 1.0)), atol=1e-5)


def test_entropy_of_a_uniform_distribution_is_log_v() -> None:
    logits = torch.zeros(1, 3, 8)
    entropy = entropy_from_logits(logits, torch.ones(1, 3))
    assert torch.allclose(entropy, torch.tensor([[0.0, 8.0, 8.0]]).log().nan_to_num(neginf=0.0))


def test_temperature_must_be_positive(model) -> None:
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(model, torch.tensor([[1, 2]]), torch.ones(1, 2), temperature=0.0)
