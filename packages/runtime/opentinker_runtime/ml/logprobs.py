"""Per-token logprobs (and entropies) of sequences under a causal LM.

Convention shared by Rollout and Trainer: index t holds log p(tokens[t] | tokens[:t]); index 0
(the first attended token of a row) is 0, and so is every position whose attention mask is 0.
Logits are divided by `temperature` before the log-softmax, so the numbers are those of the
distribution sampled from. Position ids come from the attention mask, so left- and
right-padded batches give the same numbers.
"""

from __future__ import annotations

from typing import Any

import torch


def position_ids_from_mask(attention_mask_B_T: torch.Tensor) -> torch.Tensor:
    """0, 1, 2, ... over the attended positions of each row (pads get 0)."""
    return (attention_mask_B_T.long().cumsum(-1) - 1).clamp(min=0)


def forward_logits(model: Any, tokens_B_T: torch.Tensor,
                   attention_mask_B_T: torch.Tensor) -> torch.Tensor:
    """logits_B_T_V in float32; gradients flow unless the caller disabled them."""
    output = model(input_ids=tokens_B_T, attention_mask=attention_mask_B_T,
                   position_ids=position_ids_from_mask(attention_mask_B_T), use_cache=False)
    return output.logits.float()


def shifted_log_softmax(logits_B_T_V: torch.Tensor, temperature: float) -> torch.Tensor:
    """logp_B_Tm1_V: row t is the distribution of token t+1."""
    return torch.log_softmax(logits_B_T_V[:, :-1] / _checked(temperature), dim=-1)


def logprobs_from_logits(logits_B_T_V: torch.Tensor, tokens_B_T: torch.Tensor,
                         attention_mask_B_T: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logprobs_B_T under the convention above."""
    logp_B_Tm1_V = shifted_log_softmax(logits_B_T_V, temperature)
    picked_B_Tm1 = logp_B_Tm1_V.gather(-1, tokens_B_T[:, 1:, None]).squeeze(-1)
    return _pad_first(picked_B_Tm1) * predicted_mask(attention_mask_B_T)


def entropy_from_logits(logits_B_T_V: torch.Tensor, attention_mask_B_T: torch.Tensor,
                        temperature: float = 1.0) -> torch.Tensor:
    """entropy_B_T: entropy of the distribution that predicted token t (index 0 = 0)."""
    logp_B_Tm1_V = shifted_log_softmax(logits_B_T_V, temperature)
    entropy_B_Tm1 = -(logp_B_Tm1_V.exp() * logp_B_Tm1_V).sum(-1)
    return _pad_first(entropy_B_Tm1) * predicted_mask(attention_mask_B_T)


def predicted_mask(attention_mask_B_T: torch.Tensor) -> torch.Tensor:
    """1 where token t and token t-1 are both attended: the positions that have a logprob.
    A row's first real token gets 0, whichever side the padding is on."""
    mask_B_T = attention_mask_B_T.float()
    return mask_B_T * _pad_first(mask_B_T[:, :-1])


def token_logprobs(model: Any, tokens_B_T: torch.Tensor, attention_mask_B_T: torch.Tensor,
                   temperature: float = 1.0) -> torch.Tensor:
    """logprobs_B_T of `tokens_B_T` under `model` (no gradient tracking is changed here)."""
    logits_B_T_V = forward_logits(model, tokens_B_T, attention_mask_B_T)
    return logprobs_from_logits(logits_B_T_V, tokens_B_T, attention_mask_B_T, temperature)


def _pad_first(values_B_Tm1: torch.Tensor) -> torch.Tensor:
    zeros_B_1 = values_B_Tm1.new_zeros(values_B_Tm1.shape[0], 1)
    return torch.cat([zeros_B_1, values_B_Tm1], dim=1)


def _checked(temperature: float) -> float:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return float(temperature)
