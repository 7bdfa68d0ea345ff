"""top_p 1 and top_k 0 filter nothing: the logprobs are exactly log_softmax(logits / temperature),
even for a peaked distribution whose float32 mass reaches 1 before the tail, and a row's logprobs
do not depend on a batch-mate that filters."""

from __future__ import annotations

import torch

from opentinker_rollout.engine import derive_seed
from opentinker_rollout.sampling import processed_logprobs, row_params, sample_tokens

PEAKED_1_V = torch.zeros(1, 1000)
PEAKED_1_V[0, 0] = 30.0  # p(token 0) rounds to 1 in float32; every other token ~1e-13


def test_an_unfiltered_row_gets_exactly_the_log_softmax_even_when_the_mass_saturates():
    out = processed_logprobs(PEAKED_1_V, row_params([1.0], [0], [1.0]))
    assert torch.equal(out, torch.log_softmax(PEAKED_1_V, dim=-1))
    hot = processed_logprobs(PEAKED_1_V, row_params([0.7], [0], [0.0]))  # top_p 0 = off too
    assert torch.equal(hot, torch.log_softmax(PEAKED_1_V / 0.7, dim=-1))


def test_a_row_does_not_depend_on_a_batch_mate_that_filters():
    logits_2_V = PEAKED_1_V.repeat(2, 1)
    out = processed_logprobs(logits_2_V, row_params([1.0, 1.0], [0, 5], [1.0, 1.0]))
    assert torch.equal(out[0], torch.log_softmax(PEAKED_1_V[0], dim=-1))
    assert (out[1] > -float("inf")).sum() == 5  # the batch-mate's own top-k still holds


def test_seeded_draws_are_the_same_alone_and_beside_a_filtering_row():
    logits_1_V = torch.randn(1, 300, generator=torch.Generator().manual_seed(0))
    seed = derive_seed(9, 0)
    alone, alone_lp = sample_tokens(logits_1_V, row_params([1.0], [0], [1.0]),
                                    [torch.Generator().manual_seed(seed)])
    mixed, mixed_lp = sample_tokens(logits_1_V.repeat(2, 1), row_params([1.0, 1.0], [0, 3], [1.0, 0.5]),
                                    [torch.Generator().manual_seed(seed), torch.Generator().manual_seed(1)])
    assert alone.item() == mixed[0].item() and alone_lp.item() == mixed_lp[0].item()
