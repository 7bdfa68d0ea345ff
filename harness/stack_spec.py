"""`StackSpec`: what makes one local stack differ from another.

A test that needs a stack with other settings names them in a spec, and `LocalStack` hands them
to `opentinker up` through that subprocess's environment; nobody edits the test process's
`os.environ` to make a variant. Equal specs make equal stacks, so a `StackPool` can share one
stack between every test that asks for an equal spec.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SETTING_PREFIX = "OPENTINKER_"


@dataclass(frozen=True, kw_only=True)
class StackSpec:
    """One kind of local stack: `opentinker up`'s optional processes and its processes' settings."""

    dashboard: bool = True
    """Start the web dashboard (`--dashboard-port`); False: `--no-dashboard`."""
    gateway: bool = False
    """Start the Tinker gateway (`--gateway-port`); False: `--no-gateway`."""
    settings: tuple[tuple[str, str], ...] = ()
    """OPENTINKER_* variables every process of the stack gets, as (name, value) pairs sorted by
    name (a tuple, so the spec is hashable); `StackSpec.of(**settings)` builds it from keywords."""
    python_path: tuple[str, ...] = ()
    """Directories put first on the processes' PYTHONPATH (games the EnvHost imports by module
    path, e.g. `tests.chaos._misbehaving_games:Misbehaving`, need the repository root)."""
    tls: str = "off"
    """`opentinker up --tls <mode>`: off, on or mutual (a local CA in the state dir)."""

    def __post_init__(self) -> None:
        pairs = tuple(sorted((str(name), str(value)) for name, value in dict(self.settings).items()))
        if len(pairs) != len(self.settings):
            raise ValueError(f"a setting is named twice: {self.settings}")
        if stray := [name for name, _ in pairs if not name.startswith(SETTING_PREFIX)]:
            raise ValueError(f"settings are {SETTING_PREFIX}* variables, not {stray}")
        object.__setattr__(self, "settings", pairs)
        object.__setattr__(self, "python_path", tuple(str(p) for p in self.python_path))

    @classmethod
    def of(cls, *, dashboard: bool = True, gateway: bool = False, python_path: Iterable[str] = (),
           tls: str = "off", **settings: str) -> StackSpec:
        """`StackSpec.of(dashboard=False, OPENTINKER_TRAINER_CPU_SLOTS="2")`."""
        return cls(dashboard=dashboard, gateway=gateway, settings=tuple(settings.items()),
                   python_path=tuple(python_path), tls=tls)

    @property
    def name(self) -> str:
        """A short stable name for state directories and reports: "default", or what differs
        from it ("gateway", "no-dashboard") and a digest of the settings."""
        if self == StackSpec():
            return "default"
        parts = [*(["gateway"] if self.gateway else []), *([] if self.dashboard else ["no-dashboard"]),
                 *([f"tls-{self.tls}"] if self.tls != "off" else [])]
        if self.settings or self.python_path:
            parts.append(hashlib.sha256(repr((self.settings, self.python_path)).encode()).hexdigest()[:8])
        return "-".join(parts)

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of `opentinker up` (which passes it on to every process): `base`
        (default: this process's) without its OPENTINKER_* variables, then this spec's settings,
        so a stack depends on its spec alone."""
        base = os.environ if base is None else base
        env = {k: v for k, v in base.items() if not k.startswith(SETTING_PREFIX)} | dict(self.settings)
        if self.python_path:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (*self.python_path, base.get("PYTHONPATH")) if p)
        return env


DEFAULT = StackSpec()
"""The stack most tests share: the five services, the dashboard, no gateway, default settings."""
