"""Per-row logit processing and sampling for one decoding step (pure tensor functions).

Every row of a batch carries its own temperature, top-k, top-p and random generator, so one
batched step serves requests with different sampling parameters, and a seeded row draws the
same token whatever else shares its batch.

The logprob returned for a sampled token is taken from the distribution actually sampled
from: logits / temperature, tokens outside top-k and top-p set to -inf, log-softmax
renormalised over what is left. With temperature 1 and top-k/top-p disabled this is exactly
`log_softmax(logits)` (top_p 1 drops nothing, even where float32 mass sums reach 1 before the
tail; a step where no row filters skips the sort that top-k/top-p need). A greedy row
(temperature 0) samples from a point mass; it reports the model's plain `log_softmax(logits)`
of the argmax token instead of a constant 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True, kw_only=True)
class RowParams:
    """Sampling parameters of each row of a step, as tensors of shape [B]."""

    temperature_B: torch.Tensor
    top_k_B: torch.Tensor
    top_p_B: torch.Tensor
    filtered: bool = True
    """Whether some sampled row has a top-k or top-p filter (False: skip the filtering)."""

    @property
    def greedy_B(self) -> torch.Tensor:
        return self.temperature_B <= 0


def row_params(temperatures: Sequence[float], top_ks: Sequence[int],
               top_ps: Sequence[float]) -> RowParams:
    """Pack per-row settings (top_k 0 = off; top_p 0 or 1 = off)."""
    top_ps = [p if 0 < p < 1 else 1.0 for p in top_ps]
    filtered = any(t > 0 and (k > 0 or p < 1.0) for t, k, p in zip(temperatures, top_ks, top_ps, strict=True))
    return RowParams(temperature_B=torch.tensor(temperatures, dtype=torch.float32),
                     top_k_B=torch.tensor(top_ks, dtype=torch.long), top_p_B=torch.tensor(top_ps),
                     filtered=filtered)


def processed_logprobs(logits_B_V: torch.Tensor, params: RowParams) -> torch.Tensor:
    """Log-probabilities of the sampling distribution of each row; -inf outside top-k/top-p.

    Greedy rows get the unscaled, unfiltered log_softmax (see the module docstring).
    """
    temperature_B = torch.where(params.greedy_B, 1.0, params.temperature_B).to(logits_B_V)
    scaled_B_V = logits_B_V.float() / temperature_B[:, None]
    if not params.filtered:
        return torch.log_softmax(scaled_B_V, dim=-1)
    keep_B_V = _keep_mask(scaled_B_V, params)
    keep_B_V[params.greedy_B] = True
    return torch.log_softmax(scaled_B_V.masked_fill(~keep_B_V, float("-inf")), dim=-1)


def _keep_mask(scaled_B_V: torch.Tensor, params: RowParams) -> torch.Tensor:
    """True where a token survives top-k then top-p; the most likely token always survives."""
    vocab = scaled_B_V.shape[-1]
    sorted_B_V, order_B_V = torch.sort(scaled_B_V, dim=-1, descending=True)
    rank_V = torch.arange(vocab)
    top_k_B = torch.where(params.top_k_B > 0, params.top_k_B, vocab)
    keep_sorted_B_V = rank_V[None, :] < top_k_B[:, None]
    probs_B_V = torch.softmax(sorted_B_V.masked_fill(~keep_sorted_B_V, float("-inf")), dim=-1)
    mass_before_B_V = torch.cumsum(probs_B_V, dim=-1) - probs_B_V
    top_p_B = params.top_p_B[:, None].to(probs_B_V)
    keep_sorted_B_V &= (mass_before_B_V < top_p_B) | (top_p_B >= 1.0)
    keep_sorted_B_V[:, 0] = True
    return torch.zeros_like(keep_sorted_B_V).scatter(-1, order_B_V, keep_sorted_B_V)


def sample_tokens(logits_B_V: torch.Tensor, params: RowParams,
                  generators: Sequence[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its logprob under the row's sampling distribution.

    Sampled rows draw u ~ U[0, 1) from their own generator and take the inverse CDF, so the
    draw does not depend on the other rows. Greedy rows take the argmax.
    """
    logprobs_B_V = processed_logprobs(logits_B_V, params)
    uniform_B = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
    cdf_B_V = torch.cumsum(logprobs_B_V.double().exp(), dim=-1)
    targets_B = uniform_B * cdf_B_V[:, -1]
    sampled_B = torch.searchsorted(cdf_B_V, targets_B[:, None], right=True).squeeze(-1)
    sampled_B = sampled_B.clamp(max=logits_B_V.shape[-1] - 1)
    tokens_B = torch.where(params.greedy_B, logits_B_V.argmax(dim=-1), sampled_B)
    return tokens_B, logprobs_B_V.gather(-1, tokens_B[:, None]).squeeze(-1)
