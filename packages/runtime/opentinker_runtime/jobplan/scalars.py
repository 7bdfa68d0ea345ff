"""Checks of every scalar a JobSpec sets, wherever it sits: enum numbers our protos define,
finite numbers (in game configs too), no negative number but seeds, the shared upper bounds."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

from google.protobuf import struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from opentinker_runtime.jobplan.bounds import UPPER_BOUNDS
from opentinker_runtime.jobplan.errors import ResolveError

NUMERIC_TYPES = frozenset({FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT,
                           FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64})
OPAQUE_MESSAGES = frozenset({"google.protobuf.Struct"})
"""User configs: any JSON value is allowed, only NaN and Infinity are not (they have no JSON form)."""

Scalar = tuple[FieldDescriptor, object, str]
"""(descriptor, value, field path) of one set scalar."""


def set_scalars(message: Message, path: str) -> Iterator[Scalar]:
    """Every set scalar below `message` (maps and Structs skipped), in field order."""
    for descriptor, value in message.ListFields():
        name = f"{path}.{descriptor.name}"
        values = value if descriptor.is_repeated else [value]
        for index, item in enumerate(values):
            item_path = f"{name}[{index}]" if descriptor.is_repeated else name
            if descriptor.cpp_type != FieldDescriptor.CPPTYPE_MESSAGE:
                yield descriptor, item, item_path
            elif not _skipped(descriptor.message_type):
                yield from set_scalars(item, item_path)  # type: ignore[arg-type]


def check_enums(scalars: tuple[Scalar, ...]) -> None:
    """ResolveError for the first enum number newer than our protos."""
    for descriptor, value, path in scalars:
        if descriptor.cpp_type == FieldDescriptor.CPPTYPE_ENUM and value not in descriptor.enum_type.values_by_number:
            raise ResolveError(path, f"{value} is not a known {descriptor.enum_type.name} value")


def check_numbers(scalars: tuple[Scalar, ...]) -> None:
    """Every numeric field finite; all but seeds >= 0; the shared upper bounds (`UPPER_BOUNDS`)."""
    for descriptor, value, path in scalars:
        if descriptor.cpp_type not in NUMERIC_TYPES:
            continue
        number, name = float(value), path.rsplit(".", 1)[-1]  # type: ignore[arg-type]
        if not math.isfinite(number):
            raise ResolveError(path, f"must be a finite number, got {number}")
        if number < 0 and not name.endswith("seed"):
            raise ResolveError(path, f"must not be negative, got {number:g}")
        if name in UPPER_BOUNDS and number > UPPER_BOUNDS[name]:
            raise ResolveError(path, f"must be at most {UPPER_BOUNDS[name]:g}, got {number:g}")


def check_struct_numbers(message: Message, path: str) -> None:
    """ResolveError for the first NaN or Infinity inside a Struct below `message` (a game config),
    keys in brackets: spec.environment.config['levels'][0]['penalty']."""
    for found in _non_finite_struct_numbers(message, path):
        raise ResolveError(found, "must be a finite number: NaN and Infinity have no JSON form (the "
                           "Coordinator and the games read configs as JSON)")


def _non_finite_struct_numbers(message: Message, path: str) -> Iterator[str]:
    if message.DESCRIPTOR.full_name in OPAQUE_MESSAGES:
        for key, value in message.fields.items():  # type: ignore[attr-defined]
            yield from _non_finite_values(value, f"{path}[{key!r}]")
        return
    for descriptor, value in message.ListFields():
        if descriptor.cpp_type != FieldDescriptor.CPPTYPE_MESSAGE or _map_entry(descriptor.message_type):
            continue
        items = value if descriptor.is_repeated else [value]
        for index, item in enumerate(items):
            name = f"{path}.{descriptor.name}" + (f"[{index}]" if descriptor.is_repeated else "")
            yield from _non_finite_struct_numbers(item, name)  # type: ignore[arg-type]


def _non_finite_values(value: struct_pb2.Value, path: str) -> Iterator[str]:
    kind = value.WhichOneof("kind")
    if kind == "number_value" and not math.isfinite(value.number_value):
        yield path
    elif kind == "struct_value":
        yield from _non_finite_struct_numbers(value.struct_value, path)
    elif kind == "list_value":
        for index, item in enumerate(value.list_value.values):
            yield from _non_finite_values(item, f"{path}[{index}]")


@functools.cache
def _skipped(message_type: Descriptor) -> bool:
    return _map_entry(message_type) or message_type.full_name in OPAQUE_MESSAGES


@functools.cache
def _map_entry(message_type: Descriptor) -> bool:
    return message_type.GetOptions().map_entry
