"""Enum values by name: the proto's value name without its prefix, as the plan holds them."""

from __future__ import annotations

from typing import Any


def prefix_of(enum_type: Any) -> str:
    """`LOSS_FUNCTION_` of LossFunction: its zero value's name without UNSPECIFIED."""
    return enum_type.DESCRIPTOR.values[0].name.removesuffix("UNSPECIFIED")


def enum_name(enum_type: Any, value: int) -> str:
    """The value's name without its prefix; "" for the zero (UNSPECIFIED) value. A number our
    protos do not define raises ValueError (resolving checks every enum of a spec first)."""
    if value == 0:
        return ""
    return enum_type.Name(value).removeprefix(prefix_of(enum_type))


def enum_value(enum_type: Any, name: str) -> int:
    """The number of the value named `name` (without its prefix)."""
    return enum_type.Value(prefix_of(enum_type) + name)
