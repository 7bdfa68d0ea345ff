"""One forward of a shared base in which every row goes through its own session's LoRA adapter.

The router is one more shell of the base (`shells.shell_of`: the base's own tensors). Each
linear layer that some session adapts is wrapped in a `RoutedLinear`, which runs the frozen
layer once over the whole batch and then, for each adapter in the batch, the low-rank update of
that adapter's rows only (gathered, computed, added back): a grouped LoRA computation, never a
whole-model call per adapter. The adapter modules are the sessions' own (the very parameters
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
    """Which rows of the current batch go through which adapter: (adapter key, row indices)."""

    def __init__(self) -> None:
        self.groups: list[tuple[Hashable, torch.Tensor]] = []
        self.rows = 0


class RoutedLinear(torch.nn.Module):
    """A frozen linear layer plus the low-rank updates of the adapters that target it."""

    def __init__(self, base: torch.nn.Module, routing: Routing) -> None:
        super().__init__()
        self.base = base
        self.routing = routing
        self.updates: dict[Hashable, LoraUpdate] = {}  # not submodules: the sessions own them

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        for key, rows in self.routing.groups:
            update = self.updates.get(key)
            if update is None:
                continue
            if len(rows) == self.routing.rows:  # every row: no gather
                out = out + update.lora_B(update.lora_A(x.to(update.lora_A.weight.dtype))) * update.scaling
                continue
            part = x.index_select(0, rows).to(update.lora_A.weight.dtype)
            delta = update.lora_B(update.lora_A(part)) * update.scaling
            out = out.index_add(0, rows, delta.to(out.dtype))
        return out


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

        self.routing.groups = _groups(keys, tokens_B_T.device)
        self.routing.rows = len(keys)
        try:
            return forward_logits(self.model.train(), tokens_B_T, attention_mask_B_T)
        finally:
            self.routing.groups = []

    def _layer(self, path: str) -> RoutedLinear:
        layer = self._layers.get(path)
        if layer is None:
            parent_path, _, child = path.rpartition(".")
            parent = self.model.get_submodule(parent_path) if parent_path else self.model
            layer = RoutedLinear(getattr(parent, child), self.routing)
            setattr(parent, child, layer)
            self._layers[path] = layer
        return layer


def _groups(keys: Sequence[Hashable], device: torch.device) -> list[tuple[Hashable, torch.Tensor]]:
    rows: dict[Hashable, list[int]] = {}
    for index, key in enumerate(keys):
        rows.setdefault(key, []).append(index)
    return [(key, torch.tensor(indices, dtype=torch.long, device=device)) for key, indices in rows.items()]
