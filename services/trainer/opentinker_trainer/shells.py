"""Shells: copies of a model's module tree that hold the model's own tensors.

peft adapts a model by wrapping its linear layers in place, so every session needs a module tree
of its own; a shell gives it one whose parameters and buffers are the original's tensors (no
copy of any weight).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any


def shell_of(model: Any) -> Any:
    """A copy of `model`'s module tree whose parameters and buffers are `model`'s own tensors."""
    shared = {id(tensor): tensor for tensor in itertools.chain(model.parameters(), model.buffers())}
    return copy.deepcopy(model, memo=shared)
