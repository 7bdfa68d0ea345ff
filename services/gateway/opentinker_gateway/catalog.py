"""Which base model names the Tinker API offers, and what each one is on our workers.

Names resolve offline: a built-in model (built from a config, with the project's byte tokenizer) or
a model directory on the workers' filesystem. A tenant names a model; it never names a path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path



BUILTIN_MODELS = ("tiny-llama", "tiny-qwen2", "small-llama")
"""The built-ins of opentinker_runtime.ml.models (named here so the gateway needs no torch; a test checks)."""


class CatalogError(ValueError):
    """The catalog setting cannot be read."""


@dataclass(frozen=True, kw_only=True)
class CatalogModel:
    name: str
    builtin: str = ""
    seed: int = 0
    path: str = ""

    def reference(self) -> dict:
        """The ModelReference (as a dict) the Trainer and Rollout load."""
        if self.builtin:
            return {"builtin": {"name": self.builtin, "seed": self.seed}}
        return {"local": {"path": self.path}}

    @property
    def arch(self) -> str:
        return self.builtin or Path(self.path).name


def parse_catalog(text: str) -> dict[str, CatalogModel]:
    """Every built-in under its own name, then NAME=SOURCE pairs (later names win)."""
    catalog = {name: CatalogModel(name=name, builtin=name) for name in BUILTIN_MODELS}
    for item in (part.strip() for part in text.split(",")):
        if item:
            model = _parse_entry(item)
            catalog[model.name] = model
    return catalog


def _parse_entry(item: str) -> CatalogModel:
    name, sep, source = item.partition("=")
    name, source = name.strip(), source.strip()
    if not sep or not name or not source:
        raise CatalogError(f"{item!r} is not NAME=SOURCE (e.g. demo=builtin:tiny-llama or name=/models/dir)")
    if source.startswith("builtin:"):
        return _builtin_entry(name, source.removeprefix("builtin:"))
    if not Path(source).is_absolute():
        raise CatalogError(f"{name}: {source!r} must be builtin:<name> or an absolute model directory")
    return CatalogModel(name=name, path=source)


def _builtin_entry(name: str, spec: str) -> CatalogModel:
    builtin, _, seed = spec.partition(":")
    if builtin not in BUILTIN_MODELS:
        raise CatalogError(f"{name}: builtin {builtin!r} is not one of {', '.join(sorted(BUILTIN_MODELS))}")
    if seed and not seed.isdigit():
        raise CatalogError(f"{name}: the seed in {spec!r} must be a non-negative integer")
    return CatalogModel(name=name, builtin=builtin, seed=int(seed or 0))
