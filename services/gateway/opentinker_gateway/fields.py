"""Reading fields of a request's JSON: the wrong type is a 400 that names the field, never a 500."""

from __future__ import annotations

import math
from typing import Any

from opentinker_gateway.errors import BadRequest

INT64_MAX = 2**63 - 1


def integer(body: dict, name: str, default: int | None = None, *, low: int = 0, high: int = INT64_MAX) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BadRequest(f"{name} must be an integer in {low}..{high}, got {value!r}")
    return value


def number(body: dict, name: str, default: float | None = None) -> float | None:
    value = body.get(name, default)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise BadRequest(f"{name} must be a finite number, got {value!r}")
    return float(value)


def mapping(body: dict, name: str) -> dict | None:
    value = body.get(name)
    if value is not None and not isinstance(value, dict):
        raise BadRequest(f"{name} must be an object, got {type(value).__name__}")
    return value


def text(body: dict, name: str, default: str = "") -> str:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string, got {type(value).__name__}")
    return value


def string_map(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{name} must be an object of strings")
    return {str(k): str(v) for k, v in value.items()}
