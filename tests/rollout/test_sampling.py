"""Per-row logit processing on hand-made distributions: temperature, top-k, top-p, greedy."""

from __future__ import annotations

import math

import torch

from opentinker_rollout.engine import derive_seed
from opentinker_rollout.sampling import processed_logprobs, row_params, sample_tokens

PROBS = [0.5, 0.3, 0.15, 0.05]
LOGITS_1_V = torch.tensor([PROBS]).log()


def kept(logprobs_V: torch.Tensor) -> list[int]:
    return [i for i, value in enumerate(logprobs_V.tolist()) if value > -math.inf]


def test_top_k_keeps_the_k_likeliest_and_renormalises():
    out = processed_logprobs(LOGITS_1_V, row_params([1.0], [2], [1.0]))[0]
    assert kept(out) == [0, 1]
    assert torch.allclose(out[:2].exp(), torch.tensor([0.5 / 0.8, 0.3 / 0.8]))


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    assert kept(processed_logprobs(LOGITS_1_V, row_params([1.0], [0], [0.75]))[0]) == [0, 1]
    assert kept(processed_logprobs(LOGITS_1_V, row_params([1.0], [0], [0.85]))[0]) == [0, 1, 2]
    assert kept(processed_logprobs(LOGITS_1_V, row_params([1.0], [0], [0.1]))[0]) == [0]


def test_temperature_scales_logits_and_rows_are_independent():
    logits_2_V = LOGITS_1_V.repeat(2, 1)
    out = processed_logprobs(logits_2_V, row_params([0.5, 1.0], [0, 0], [1.0, 1.0]))
    expected_hot = torch.log_softmax(LOGITS_1_V[0] / 0.5, dim=-1)
    assert torch.allclose(out[0], expected_hot) and torch.allclose(out[1], LOGITS_1_V[0].log_softmax(-1))


def test_greedy_rows_take_the_argmax_and_report_the_plain_logprob():
    generators = [torch.Generator().manual_seed(1)]
    tokens, logprobs = sample_tokens(LOGITS_1_V, row_params([0.0], [1], [0.5]), generators)
    assert tokens.tolist() == [0] and math.isclose(logprobs.item(), math.log(0.5), rel_tol=1e-6)


def test_sampling_follows_the_distribution_and_never_picks_filtered_tokens():
    generator = torch.Generator().manual_seed(0)
    counts = [0, 0, 0, 0]
    for _ in range(4000):
        token, _ = sample_tokens(LOGITS_1_V, row_params([1.0], [3], [1.0]), [generator])
        counts[token.item()] += 1
    assert counts[3] == 0
    for index, target in enumerate([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95]):
        assert abs(counts[index] / 4000 - target) < 0.03


def test_derived_seeds_are_stable_distinct_and_non_zero():
    assert derive_seed(7, 0) == derive_seed(7, 0)
    seeds = {derive_seed(7, i) for i in range(100)} | {derive_seed(8, i) for i in range(100)}
    assert len(seeds) == 200 and 0 not in seeds
    assert all(0 < s < 2**63 for s in seeds)
