"""One forward of a shared base in which every row goes through its own session's LoRA adapter.

The router is one more shell of the base (`shells.shell_of`: the base's own tensors). Each
linear layer that some session adapts is wrapped in a `RoutedLinear`, which runs the frozen
layer once over the whole batch and then, for each run of rows of one adapter (a batch holds
each session's rows together), the low-rank update of those rows only, added back in one
addition: a grouped LoRA computation, never a whole-model call per adapter. The adapter modules are the sessions' own (the very parameters
their optimizers step), so gradients of a row reach its session's adapter and no other.

Only vanilla LoRA on linear layers without dropout is routed (`routable`); the computation is
the one peft's `lora.Linear` does for a session alone: base(x) + B(A(x)) * scaling.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from peft.tuners.lora import Linear as LoraLinear

from opentinker_trainer.shells import shell_of

ADAPTER = "default"
"""The adapter name of a session's peft model."""
PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class LoraUpdate:
    """One session's low-rank update of one linear layer."""

    lora_A: torch.nn.Module
    lora_B: torch.nn.Module
    scaling: float


class Routing:
    """Which rows of the current batch go through which adapter: runs of consecutive rows with
    one adapter key each, (key, start, end), covering the batch in order."""

    def __init__(self) -> None:
        self.runs: list[tuple[Hashable, int, int]] = []


class RoutedLinear(torch.nn.Module):
    """A frozen linear layer plus the low-rank updates of the adapters that target it."""

    def __init__(self, base: torch.nn.Module, routing: Routing) -> None:
        super().__init__()
        self.base = base
        self.routing = routing
        self.updates: dict[Hashable, LoraUpdate] = {}  # not submodules: the sessions own them

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        runs = self.routing.runs
        if len(runs) == 1:
            delta = self._delta(runs[0][0], x)
            return out if delta is None else out + delta.to(out.dtype)
        for key, start, end in runs:  # in place: the linear's backward does not read its output
            delta = self._delta(key, x[start:end])
            if delta is not None:
                out[start:end] += delta.to(out.dtype)
        return out

    def _delta(self, key: Hashable, rows: torch.Tensor) -> torch.Tensor | None:
        update = self.updates.get(key)
        if update is None:
            return None
        return update.lora_B(update.lora_A(rows.to(update.lora_A.weight.dtype))) * update.scaling


def lora_updates(peft_model: Any) -> dict[str, LoraUpdate] | None:
    """The adapter's update per layer path of the base (e.g. "model.layers.0.self_attn.q_proj"),
    or None when some adapted layer is not vanilla LoRA on a linear layer without dropout."""
    updates: dict[str, LoraUpdate] = {}
    for name, module in peft_model.named_modules():
        if not hasattr(module, "lora_A") or ADAPTER not in getattr(module, "lora_A", {}):
            continue
        if not _vanilla_linear(module):
            return None
        updates[name.removeprefix(PEFT_PREFIX)] = LoraUpdate(
            lora_A=module.lora_A[ADAPTER], lora_B=module.lora_B[ADAPTER], scaling=float(module.scaling[ADAPTER]))
    return updates or None


def _vanilla_linear(module: Any) -> bool:
    dropout = module.lora_dropout[ADAPTER]
    return (isinstance(module, LoraLinear) and not module.merged and not module.use_dora.get(ADAPTER, False)
            and ADAPTER not in getattr(module, "lora_variant", {})
            and (isinstance(dropout, torch.nn.Identity) or getattr(dropout, "p", 0) == 0))


def has_dropout(model: Any) -> bool:
    """Whether a forward in train mode draws random numbers (a dropout with p > 0)."""
    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()) or any(
        float(getattr(model.config, name, 0) or 0) > 0 for name in ("attention_dropout", "hidden_dropout",
                                                                    "resid_pdrop", "attn_pdrop", "embd_pdrop"))


class AdapterRouter:
    """A shell of a base model whose adapted linear layers route rows to adapters by key."""

    def __init__(self, base_model: Any) -> None:
        self.model = shell_of(base_model)
        self.routing = Routing()
        self._layers: dict[str, RoutedLinear] = {}
        self._keys: set[Hashable] = set()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._keys

    def attach(self, key: Hashable, updates: dict[str, LoraUpdate]) -> None:
        """Route rows of `key` through `updates` (from `lora_updates`)."""
        for path, update in updates.items():
            self._layer(path).updates[key] = update
        self._keys.add(key)

    def detach(self, key: Hashable) -> None:
        for layer in self._layers.values():
            layer.updates.pop(key, None)
        self._keys.discard(key)

    def logits(self, keys: Sequence[Hashable], tokens_B_T: torch.Tensor,
               attention_mask_B_T: torch.Tensor) -> torch.Tensor:
        """float32 logits_B_T_V of a right-padded batch, row b through the adapter of keys[b]."""
        from opentinker_runtime.ml.logprobs import forward_logits

        self.routing.runs = _runs(keys)
        try:
            return forward_logits(self.model.train(), tokens_B_T, attention_mask_B_T)
        finally:
            self.routing.runs = []

    def calling(self, keys_per_call: Sequence[Sequence[Hashable]]) -> _RoutedCalls:
        """The router's model as a callable for code that calls a model several times (the
        shared-prefix forward): call i routes its rows by keys_per_call[i]."""
        return _RoutedCalls(self, list(keys_per_call))

    def _layer(self, path: str) -> RoutedLinear:
        layer = self._layers.get(path)
        if layer is None:
            parent_path, _, child = path.rpartition(".")
            parent = self.model.get_submodule(parent_path) if parent_path else self.model
            layer = RoutedLinear(getattr(parent, child), self.routing)
            setattr(parent, child, layer)
            self._layers[path] = layer
        return layer


class _RoutedCalls:
    def __init__(self, router: AdapterRouter, keys_per_call: list[Sequence[Hashable]]) -> None:
        self._router = router
        self._pending = keys_per_call

    def __call__(self, **inputs: Any) -> Any:
        self._router.routing.runs = _runs(self._pending.pop(0))
        try:
            return self._router.model.train()(**inputs)
        finally:
            self._router.routing.runs = []


def _runs(keys: Sequence[Hashable]) -> list[tuple[Hashable, int, int]]:
    """Runs of equal consecutive keys: (key, start, end)."""
    runs: list[tuple[Hashable, int, int]] = []
    for index, key in enumerate(keys):
        if runs and runs[-1][0] == key:
            runs[-1] = (key, runs[-1][1], index + 1)
        else:
            runs.append((key, index, index + 1))
    return runs
