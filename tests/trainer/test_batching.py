"""Datum validation (errors name the field and index), padding and micro-batch planning."""

from __future__ import annotations

import math

import pytest
import torch

from opentinker_trainer.batching import Datum, pad_batch, plan_micro_batches, validate_datums
from opentinker_trainer.config import LossConfig, LossFunction
from opentinker_trainer.errors import ValidationError

CE = LossConfig(function=LossFunction.CROSS_ENTROPY)
PPO = LossConfig(function=LossFunction.PPO_CLIP)
PG = LossConfig(function=LossFunction.POLICY_GRADIENT)


def datum(n: int = 4, **fields) -> Datum:
    return Datum(tokens=tuple(range(1, n + 1)), loss_mask=(0.0,) + (1.0,) * (n - 1), **fields)


def check(datums, loss=CE, *, vocab_size=260, max_length=512) -> None:
    validate_datums(datums, loss, vocab_size=vocab_size, max_length=max_length)


def test_valid_datums_pass() -> None:
    check([datum(), datum(6)])
    check([datum(advantages=(1.0,) * 4, sampling_logprobs=(-1.0,) * 4)], PPO)


@pytest.mark.parametrize(("datums", "loss", "field", "words"), [
    ([], CE, "datums", "at least one"),
    ([datum(), Datum(tokens=(), loss_mask=())], CE, "datums[1].tokens", "must not be empty"),
    ([datum(), datum(), Datum(tokens=(1, 2, 3), loss_mask=(1.0, 1.0))], CE,
     "datums[2].loss_mask", "has 2 values for 3 tokens"),
    ([datum(advantages=(1.0,) * 4)], PPO, "datums[0].sampling_logprobs",
     "has 0 values for 4 tokens; one per token is required (ppo_clip needs it)"),
    ([datum()], PG, "datums[0].advantages", "(policy_gradient needs it)"),
    ([datum(reference_logprobs=(0.0,) * 3)], CE, "datums[0].reference_logprobs", "has 3 values"),
    ([Datum(tokens=(1, 260), loss_mask=(0.0, 1.0))], CE, "datums[0].tokens",
     "token id 260 is outside the vocabulary [0, 260)"),
    ([Datum(tokens=(1, -1), loss_mask=(0.0, 1.0))], CE, "datums[0].tokens", "token id -1"),
    ([datum(advantages=(1.0, math.nan, 1.0, 1.0))], PG, "datums[0].advantages", "finite"),
    ([Datum(tokens=(1, 2), loss_mask=(0.0, -1.0))], CE, "datums[0].loss_mask", ">= 0"),
])
def test_bad_datums_name_the_field(datums, loss, field, words) -> None:
    with pytest.raises(ValidationError) as raised:
        check(datums, loss)
    assert raised.value.field == field
    assert words in str(raised.value)


def test_too_long_for_the_context() -> None:
    with pytest.raises(ValidationError, match=r"datums\[0\].tokens: has 9 tokens; the model's context"):
        check([datum(9)], max_length=8)


def test_pad_batch_right_pads_and_never_trains_index_0() -> None:
    batch = pad_batch([Datum(tokens=(5, 6, 7), loss_mask=(1.0, 1.0, 0.5), advantages=(0.0, 2.0, 3.0)),
                       Datum(tokens=(8,), loss_mask=(1.0,))])
    assert batch.tokens_B_T.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch.attention_mask_B_T.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch.loss_mask_B_T.tolist() == [[0.0, 1.0, 0.5], [0.0, 0.0, 0.0]]
    assert batch.advantages_B_T.tolist() == [[0.0, 2.0, 3.0], [0.0, 0.0, 0.0]]
    assert batch.reference_logprobs_B_T is None and not batch.has_sampling_logprobs
    assert batch.lengths == (3, 1) and batch.tokens_B_T.dtype == torch.long


def test_micro_batches_respect_the_budget_and_cover_every_datum_once() -> None:
    lengths = [10, 3, 7, 7, 2, 12, 5]
    plan = plan_micro_batches(lengths, max_tokens=20)
    assert sorted(i for mb in plan for i in mb) == list(range(7))
    for micro_batch in plan:
        assert len(micro_batch) * max(lengths[i] for i in micro_batch) <= 20
    assert plan_micro_batches(lengths, 0) == [[5, 0, 2, 3, 6, 1, 4]]
    assert plan_micro_batches([30, 4], 16) == [[0], [1]], "a datum over the budget goes alone"
