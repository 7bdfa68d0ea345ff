"""One frozen base model per (model source, precision, device), shared by the LoRA sessions of
a Trainer.

A LoRA session trains only its adapter: the base model's weights are read, never written. So
the sessions of one base hold one copy of it: each session gets a *shell*, a module tree of its
own (peft wraps the shell's linear layers in place) whose parameters and buffers are the very
tensors of the resident base. A session computes exactly what it would on a private copy (the
same tensors, bit for bit); ten sessions cost one base plus ten adapters.

A base is loaded when the first session of its key opens and freed when the last one closes.
Sessions keep everything else of their own: adapter, optimizer state, RNG, schedule,
checkpoints. What may never happen to a shared tensor: an in-place write. LoRA sessions never
write base weights (checkpoints load adapter tensors only, merging happens on a deep copy).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from opentinker_runtime.ml.models import LoadedModel, load_model
from opentinker_runtime.ml.sources import ModelSource
from opentinker_trainer.adapter_router import AdapterRouter, LoraUpdate, has_dropout, lora_updates
from opentinker_trainer.metrics import RESIDENT_ADAPTERS, RESIDENT_BASES
from opentinker_trainer.shells import shell_of

log = structlog.get_logger(__name__)

Loader = Callable[[ModelSource, Path, str], LoadedModel]
"""(source, checkpoint root, device) -> the loaded model (`load_model` by default)."""


def base_key(source: ModelSource, device: str) -> str:
    """What makes two sessions' bases the same: the whole source (kind, name or path, seed,
    precision) and the device."""
    return json.dumps({"source": source.to_dict(), "device": device}, sort_keys=True)


@dataclass(kw_only=True)
class ResidentBase:
    """A loaded base, the sessions holding it, and (once a cycle needs it) the router that runs
    several sessions' rows through it in one forward (`adapter_router`)."""

    key: str
    source: ModelSource
    loaded: LoadedModel
    holders: set[int] = field(default_factory=set)
    routable: bool = False
    """The base draws no random numbers in train mode (no dropout): a routed forward computes
    what each session's own forward does."""
    _router: AdapterRouter | None = None

    def router(self) -> AdapterRouter:
        if self._router is None:
            self._router = AdapterRouter(self.loaded.model)
        return self._router

    def forget(self, key: int) -> None:
        if self._router is not None:
            self._router.detach(key)


class BaseHandle:
    """One session's hold on a resident base: `model` is the session's shell, `release()` (once)
    lets the base go when no other session holds it."""

    def __init__(self, bases: SharedBases, resident: ResidentBase) -> None:
        self._bases = bases
        self.resident: ResidentBase | None = resident
        self.key = resident.key
        self.model = shell_of(resident.loaded.model)
        self.tokenizer = resident.loaded.tokenizer
        self.updates: dict[str, LoraUpdate] | None = None
        """The session's adapter per layer (`adopt`); None: it cannot be routed."""

    @property
    def routable(self) -> bool:
        """Whether the session's rows may share a routed forward with other sessions'."""
        return self.resident is not None and self.resident.routable and self.updates is not None

    def adopt(self, peft_model: Any) -> None:
        """The session's adapted model is ready: remember its adapter's layers."""
        self.updates = lora_updates(peft_model)

    def router(self) -> AdapterRouter:
        if self.resident is None:
            raise RuntimeError("the session let its base go")
        return self.resident.router()

    def release(self) -> None:
        """Let the base go (once); the handle keeps no reference to it, so whatever still holds
        the handle (a closed session) holds no weights."""
        resident, self.resident = self.resident, None
        if resident is not None:
            self.model = self.updates = None
            resident.forget(id(self))
            self._bases.release(resident, id(self))


class SharedBases:
    """The resident bases of one Trainer process, by `base_key`."""

    def __init__(self, loader: Loader | None = None) -> None:
        self._loader = loader or (lambda source, root, device: load_model(source, root, device=device))
        self._resident: dict[str, ResidentBase] = {}
        self._lock = threading.Lock()

    def acquire(self, source: ModelSource, checkpoint_root: Path, device: str) -> BaseHandle:
        """A shell of the base `source` names on `device`, loading it when no session holds it."""
        key = base_key(source, device)
        with self._lock:
            resident = self._resident.get(key)
            if resident is None:
                loaded = self._frozen(source, checkpoint_root, device)
                resident = ResidentBase(key=key, source=source, loaded=loaded, routable=not has_dropout(loaded.model))
                self._resident[key] = resident
                log.info("base_loaded", base=source.to_dict(), device=device)
            handle = BaseHandle(self, resident)
            resident.holders.add(id(handle))
            self._count()
            return handle

    def release(self, resident: ResidentBase, holder: int) -> None:
        with self._lock:
            resident.holders.discard(holder)
            if not resident.holders and self._resident.get(resident.key) is resident:
                del self._resident[resident.key]
                log.info("base_freed", base=resident.source.to_dict())
            self._count()

    def holders(self, key: str) -> int:
        """How many sessions stand on the base of `key` now (0 when it is not loaded)."""
        with self._lock:
            resident = self._resident.get(key)
            return len(resident.holders) if resident else 0

    def resident(self) -> list[ResidentBase]:
        """The bases loaded now (each with at least one holder)."""
        with self._lock:
            return list(self._resident.values())

    def _count(self) -> None:
        RESIDENT_BASES.set(len(self._resident))
        RESIDENT_ADAPTERS.set(sum(len(r.holders) for r in self._resident.values()))

    def _frozen(self, source: ModelSource, checkpoint_root: Path, device: str) -> LoadedModel:
        loaded = self._loader(source, checkpoint_root, device)
        for parameter in loaded.model.parameters():
            parameter.requires_grad_(False)
        return loaded
