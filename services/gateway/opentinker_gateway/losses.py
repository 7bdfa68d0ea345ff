"""Tinker's built-in losses by name, as the Trainer's LossConfig (a dict of its fields).

Tinker sums every loss over the batch's target positions (`loss:sum`), so every mapping uses
LOSS_AGGREGATION_SUM. Ratios r = exp(logp - logp_sampling); Tinker's clip thresholds are ratios
(0.8, 1.2), the Trainer's clip_low/clip_high are distances from 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opentinker_gateway.errors import BadRequest

DEFAULT_THRESHOLDS = {"ppo": (0.8, 1.2), "cispo": (0.0, 4.0)}
"""Tinker's default (clip_low_threshold, clip_high_threshold) per loss."""


@dataclass(frozen=True)
class TinkerLoss:
    name: str
    function: str
    """LossFunction value name of the Trainer's API."""
    inputs: tuple[str, ...]
    """loss_fn_inputs a datum must carry (besides target_tokens)."""
    config_keys: tuple[str, ...] = ()

    @property
    def uses_advantages(self) -> bool:
        return "advantages" in self.inputs


LOSSES: dict[str, TinkerLoss] = {loss.name: loss for loss in (
    TinkerLoss("cross_entropy", "LOSS_FUNCTION_CROSS_ENTROPY", ("weights",)),
    TinkerLoss("importance_sampling", "LOSS_FUNCTION_IMPORTANCE_SAMPLING", ("logprobs", "advantages")),
    TinkerLoss("ppo", "LOSS_FUNCTION_PPO_CLIP", ("logprobs", "advantages"),
               ("clip_low_threshold", "clip_high_threshold")),
    TinkerLoss("cispo", "LOSS_FUNCTION_CISPO", ("logprobs", "advantages"),
               ("clip_low_threshold", "clip_high_threshold")),
    TinkerLoss("dro", "LOSS_FUNCTION_DRO", ("logprobs", "advantages"), ("beta",)),
)}


def tinker_loss(name: str) -> TinkerLoss:
    loss = LOSSES.get(name)
    if loss is None:
        raise BadRequest(f"loss_fn {name!r} is not supported here; supported: {', '.join(LOSSES)} "
                         f"(forward_backward_custom runs any loss on the client)")
    return loss


def loss_config(loss: TinkerLoss, config: Mapping[str, float | str] | None) -> dict:
    """The Trainer's LossConfig fields for `loss` with Tinker's loss_fn_config applied."""
    values = _numbers(loss, config or {})
    fields: dict = {"function": loss.function, "aggregation": "LOSS_AGGREGATION_SUM"}
    if loss.name in DEFAULT_THRESHOLDS:
        default_low, default_high = DEFAULT_THRESHOLDS[loss.name]
        low = values.get("clip_low_threshold", default_low)
        high = values.get("clip_high_threshold", default_high)
        strict = loss.name == "ppo"  # a ppo clip range must be a real band around 1
        if not (0 < low < 1 < high if strict else 0 <= low <= 1 <= high):
            rule = "0 < clip_low_threshold < 1 < clip_high_threshold" if strict else \
                "0 <= clip_low_threshold <= 1 <= clip_high_threshold"
            raise BadRequest(f"loss_fn_config: {loss.name} needs {rule}, got {low:g} and {high:g}")
        fields |= {"clip_low": 1.0 - low, "clip_high": high - 1.0}
    if loss.name == "dro":
        if values.get("beta", 0.0) <= 0:
            raise BadRequest("loss_fn_config: dro needs beta > 0 (the weight of its (logp - logp_sampling)^2 "
                             "penalty), e.g. loss_fn_config={'beta': 0.05}")
        fields["dro_beta"] = values["beta"]
    return fields


def _numbers(loss: TinkerLoss, config: Mapping[str, float | str]) -> dict[str, float]:
    numbers = {}
    for key, value in config.items():
        if key not in loss.config_keys:
            allowed = ", ".join(loss.config_keys) or "none"
            raise BadRequest(f"loss_fn_config key {key!r} is not used by {loss.name} (its keys: {allowed})")
        if isinstance(value, str) or value != value or value in (float("inf"), float("-inf")):
            raise BadRequest(f"loss_fn_config {key!r} must be a finite number, got {value!r}")
        numbers[key] = float(value)
    return numbers
