"""Validating a game's constructor config: each check returns the value or raises
GameConfigError naming the field (the EnvHost answers INVALID_ARGUMENT with that message)."""

from __future__ import annotations

import math

from opentinker_env.game import SPLITS, GameConfigError


def integer(name: str, value: object, *, low: int | None = None, high: int | None = None,
            high_name: str | None = None) -> int:
    """An int; integral floats (JSON numbers) are accepted. `high_name` words the upper bound
    when it is another field ("size")."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise GameConfigError(f"{name}: expected an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = (f"from {low} to {high_name or high}" if low is not None and high is not None
                  else f">= {low}" if low is not None else f"<= {high_name or high}")
        raise GameConfigError(f"{name}: expected an integer {bounds}, got {value}")
    return value


def finite(name: str, value: object, *, low: float | None = None, high: float | None = None) -> float:
    """A finite number within the bounds given."""
    number_ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number_ok or (low is not None and value < low) or (high is not None and value > high):  # type: ignore[operator]
        bound = f" >= {low:g}" if low is not None else f" <= {high:g}" if high is not None else ""
        raise GameConfigError(f"{name}: expected a finite number{bound}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def boolean(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise GameConfigError(f"{name}: expected true or false, got {value!r}")
    return value


def text(name: str, value: object) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise GameConfigError(f"{name}: expected a non-empty string, got {value!r}")
    return value


def choice(name: str, value: object, options: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in options:
        raise GameConfigError(f"{name}: expected one of {', '.join(repr(o) for o in options)}, got {value!r}")
    return value




def reset_position(split: object, index: int | None, seed: int | None, *, next_index: int,
                   eval_size: int) -> int:
    """Which episode `reset(index=, split=, seed=)` asks for: `index` when given; else `seed`
    (modulo `eval_size` for eval); else `next_index`, the split's next episode."""
    if split not in SPLITS:
        raise GameConfigError(f"split: expected 'train' or 'eval', got {split!r}")
    if index is not None:
        return integer("index", index, low=0)
    if seed is None:
        return next_index
    seed = integer("seed", seed, low=0)
    return seed % eval_size if split == "eval" else seed
