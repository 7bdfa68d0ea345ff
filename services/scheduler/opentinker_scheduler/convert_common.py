"""Protobuf <-> domain helpers shared by the converters: enums by name, times, durations.

Domain enums carry the protobuf value names without their prefix, so `Job.STATE_QUEUED` is
`JobState.QUEUED`; a number that is no value of the enum is an INVALID_ARGUMENT naming the field.
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from google.protobuf import duration_pb2, timestamp_pb2

from opentinker_scheduler.errors import InvalidArgument

E = TypeVar("E", bound=enum.Enum)


def enum_from_proto(domain: type[E], proto_enum: Any, prefix: str, value: int, *, field: str) -> E:
    """`proto_enum` is the generated EnumTypeWrapper (e.g. job_pb2.Job.State)."""
    try:
        return domain(proto_enum.Name(value).removeprefix(prefix))
    except ValueError:
        raise InvalidArgument(field, f"{value} is not a known value") from None


def enum_to_proto(proto_enum: Any, prefix: str, value: enum.Enum) -> int:
    return int(proto_enum.Value(prefix + str(value.value)))


def timestamp(ms: int) -> timestamp_pb2.Timestamp | None:
    """A Timestamp, or None (unset field) for 0."""
    if not ms:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def milliseconds_from_proto(stamp: timestamp_pb2.Timestamp, *, field: str) -> int:
    """A reported Timestamp in ms since the epoch; InvalidArgument naming `field` when it is out of
    the range a Timestamp allows (years 1 to 9999, nanos 0 to 999,999,999)."""
    try:
        return stamp.ToMilliseconds()
    except ValueError as error:
        raise InvalidArgument(field, str(error).removeprefix("Timestamp is not valid: ")) from None


def duration(ms: int) -> duration_pb2.Duration:
    span = duration_pb2.Duration()
    span.FromMilliseconds(ms)
    return span
