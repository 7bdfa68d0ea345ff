"""Hypothesis strategies built from protobuf descriptors, for fuzzing every RPC.

Three kinds of request, all derived from the request type's descriptor (nothing per RPC):

* `message_strategy`: a random message. Scalars include the extremes (int32/int64 bounds,
  negative sizes, NaN, +-inf, -0.0), strings include random text (no lone surrogates: protobuf
  refuses those client-side), path-like and control characters and, rarely, a 1 MiB string;
  enums take known and unknown numbers; nested messages go `depth` levels down; repeated
  fields sometimes carry hundreds of copies; maps and oneofs are filled like anything else;
  `google.protobuf.Struct` fields (configs, kwargs) are JSON-like and sometimes nested 40 deep.
* `wire_strategy`: raw bytes for a pass-through serializer: garbage, records with the request's
  own field numbers but random wire types and payloads (wrong types, bad lengths, groups,
  invalid wire types 6/7), and truncated or bit-flipped encodings of a random message.
* `mutation_strategy`: a valid example request with ONE field (at any depth, set or not)
  replaced by a random value, so validation deep inside is reached, not just the first check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

FD = FieldDescriptor
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)
INT32_EDGES = (0, 1, -1, 2, 7, 256, 4096, 2**31 - 1, -(2**31), 2**16, -(2**16))
INT64_EDGES = (*INT32_EDGES, 2**63 - 1, -(2**63), 2**53 + 1, 2**32)
FLOAT_EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-3, math.nan, math.inf, -math.inf, 3.4e38, -3.4e38, 1e-45)
STRING_EDGES = ("", " ", "a", "0", "-1", "NaN", "../../../../etc/passwd", "/tmp", "..", "\x00", "\n",
                "%s%n%x", "${jndi:x}", "'; DROP TABLE jobs; --", "\u202eevil", "😀" * 3, "a" * 300,
                "tiny-llama", "math", "gomoku", "black", "cpu:0", "127.0.0.1:1", "otk_00_00")
HUGE_TEXT_CHARS = 1 << 20  # 1 MiB of ASCII: one fits under gRPC's 4 MiB message limit
MANY_ITEMS = (64, 512)
DEEP_NESTING = (8, 40)
RARE = 12  # a rare branch is taken about once in RARE draws
STRUCT_TYPES = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}


def rarely(common: st.SearchStrategy, rare: st.SearchStrategy) -> st.SearchStrategy:
    """`rare` about once in RARE draws, else `common` (one_of alone would be 50/50)."""
    return st.integers(0, RARE - 1).flatmap(lambda roll: rare if roll == 0 else common)


# -- scalars ----------------------------------------------------------------------------------

def _ints(bounds: tuple[int, int], edges: Sequence[int]) -> st.SearchStrategy[int]:
    low, high = bounds
    return st.one_of(st.sampled_from([e for e in edges if low <= e <= high]), st.integers(low, high),
                     st.integers(-3, 40).filter(lambda v: low <= v <= high))


def _floats(width: int) -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(FLOAT_EDGES), st.floats(width=width), st.floats(0, 1, width=width))


def text_strategy() -> st.SearchStrategy[str]:
    huge = st.builds(lambda ch, n: ch * n, st.sampled_from("ax/é"), st.sampled_from([4096, HUGE_TEXT_CHARS // 2]))
    return rarely(st.one_of(st.text(max_size=24), st.sampled_from(STRING_EDGES)), huge)


def bytes_strategy() -> st.SearchStrategy[bytes]:
    return rarely(st.binary(max_size=48), st.builds(lambda n: b"\xff" * n, st.sampled_from([4096, 1 << 19])))


SCALARS: dict[int, Callable[[], st.SearchStrategy[Any]]] = {
    FD.TYPE_INT32: lambda: _ints(INT32, INT32_EDGES), FD.TYPE_SINT32: lambda: _ints(INT32, INT32_EDGES),
    FD.TYPE_SFIXED32: lambda: _ints(INT32, INT32_EDGES), FD.TYPE_INT64: lambda: _ints(INT64, INT64_EDGES),
    FD.TYPE_SINT64: lambda: _ints(INT64, INT64_EDGES), FD.TYPE_SFIXED64: lambda: _ints(INT64, INT64_EDGES),
    FD.TYPE_UINT32: lambda: _ints(UINT32, INT64_EDGES), FD.TYPE_FIXED32: lambda: _ints(UINT32, INT64_EDGES),
    FD.TYPE_UINT64: lambda: _ints(UINT64, INT64_EDGES), FD.TYPE_FIXED64: lambda: _ints(UINT64, INT64_EDGES),
    FD.TYPE_BOOL: st.booleans, FD.TYPE_FLOAT: lambda: _floats(32), FD.TYPE_DOUBLE: lambda: _floats(64),
    FD.TYPE_STRING: text_strategy, FD.TYPE_BYTES: bytes_strategy,
}


def enum_strategy(field: FieldDescriptor) -> st.SearchStrategy[int]:
    """Known values, and unknown ones (proto3 enums are open: any int32 travels)."""
    known = [value.number for value in field.enum_type.values]
    return st.one_of(st.sampled_from(known), _ints(INT32, (max(known) + 1, -1, 2**31 - 1, -(2**31))))


def single_value_strategy(field: FieldDescriptor, depth: int, small: bool = False) -> st.SearchStrategy[Any]:
    """One value of the field's element type (a Message instance for message fields); `small`
    leaves out the huge strings and long lists (for elements repeated many times)."""
    if field.type == FD.TYPE_ENUM:
        return enum_strategy(field)
    if field.type == FD.TYPE_MESSAGE:
        if field.message_type.full_name == "google.protobuf.Struct":
            return struct_strategy(field.message_type)
        return message_strategy(field.message_type, depth - 1, small)
    if small and field.type in (FD.TYPE_STRING, FD.TYPE_BYTES):
        return st.text(max_size=8) if field.type == FD.TYPE_STRING else st.binary(max_size=8)
    return SCALARS[field.type]()


# -- JSON-like configs (google.protobuf.Struct) -----------------------------------------------

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=12),
                         st.sampled_from([0, 1, -1, 2**53, 1e308, "", "../x"]))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=8)


def _nested(depth: int, leaf: Any) -> dict[str, Any]:
    value: Any = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else {"l": [value]}
    return value if isinstance(value, dict) else {"k": value}


def struct_strategy(descriptor: Descriptor) -> st.SearchStrategy[Message]:
    shallow = st.dictionaries(st.text(max_size=12), JSON_VALUES, max_size=4)
    deep = st.builds(_nested, st.sampled_from(DEEP_NESTING), JSON_SCALARS)
    return rarely(shallow, deep).map(lambda values: _struct(descriptor, values))


def _struct(descriptor: Descriptor, values: dict[str, Any]) -> Message:
    message = GetMessageClass(descriptor)()
    message.update(values)
    return message


# -- fields and messages ----------------------------------------------------------------------

def is_map(field: FieldDescriptor) -> bool:
    return field.type == FD.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def field_strategy(field: FieldDescriptor, depth: int, small: bool = False) -> st.SearchStrategy[Any]:
    """A value for the whole field: element, list (repeated) or dict (map)."""
    if is_map(field):
        key_field, value_field = (field.message_type.fields_by_name[n] for n in ("key", "value"))
        keys = single_value_strategy(key_field, depth, small)
        values = single_value_strategy(value_field, depth, small)
        few = st.dictionaries(keys, values, max_size=3)
        if small:
            return few
        many = st.builds(lambda v, n: {_map_key(key_field, i): v for i in range(n)},
                         single_value_strategy(value_field, depth, True), st.sampled_from(MANY_ITEMS))
        return rarely(few, many)
    element = single_value_strategy(field, depth, small)
    if not field.is_repeated:
        return element
    few = st.lists(element, max_size=3)
    if small:
        return few
    many = st.builds(lambda v, n: [v] * n, single_value_strategy(field, depth, True), st.sampled_from(MANY_ITEMS))
    return rarely(few, many)


def _map_key(key_field: FieldDescriptor, index: int) -> Any:
    return f"k{index}" if key_field.type == FD.TYPE_STRING else index


def message_strategy(descriptor: Descriptor, depth: int = 3, small: bool = False) -> st.SearchStrategy[Message]:
    """A random message of `descriptor`'s type; nested messages `depth` levels down."""
    if depth <= 0:
        return st.builds(GetMessageClass(descriptor))
    plain = {f.name: field_strategy(f, depth, small) for f in descriptor.fields if _is_plain(f)}
    oneofs = [_oneof_strategy(oneof, depth, small) for oneof in descriptor.oneofs if not _is_synthetic(oneof)]
    return st.builds(lambda values, chosen: build_message(descriptor, values, chosen),
                     st.fixed_dictionaries({}, optional=plain), st.tuples(*oneofs))


def _is_synthetic(oneof: Any) -> bool:
    """proto3 `optional` fields sit in a one-field oneof named `_<field>`."""
    return len(oneof.fields) == 1 and oneof.name == f"_{oneof.fields[0].name}"


def _is_plain(field: FieldDescriptor) -> bool:
    return field.containing_oneof is None or _is_synthetic(field.containing_oneof)


def _oneof_strategy(oneof: Any, depth: int, small: bool) -> st.SearchStrategy[tuple[str, Any] | None]:
    members = [st.tuples(st.just(f.name), field_strategy(f, depth, small)) for f in oneof.fields]
    return st.one_of(st.none(), *members)


def build_message(descriptor: Descriptor, values: dict[str, Any],
                  chosen: Sequence[tuple[str, Any] | None] = ()) -> Message:
    message = GetMessageClass(descriptor)()
    for name, value in [*values.items(), *(c for c in chosen if c is not None)]:
        assign(message, descriptor.fields_by_name[name], value)
    return message


def assign(message: Message, field: FieldDescriptor, value: Any) -> None:
    """Set `field` of `message` to `value` (element, list or dict), replacing what was there."""
    name = field.name
    if is_map(field):
        target = getattr(message, name)
        target.clear()
        for key, item in value.items():
            if isinstance(item, Message):
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif field.is_repeated:
        target = getattr(message, name)
        del target[:]
        if field.type == FD.TYPE_MESSAGE:  # extend() re-parses, past the depth limit a deep Struct has
            for item in value:
                target.add().CopyFrom(item)
        else:
            target.extend(value)
    elif field.type == FD.TYPE_MESSAGE:
        getattr(message, name).CopyFrom(value)
    else:
        setattr(message, name, value)


# -- raw bytes --------------------------------------------------------------------------------

def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def wire_record(number: int, wire_type: int, payload: bytes) -> bytes:
    return varint((number << 3) | wire_type) + payload


def _payload(wire_type: int) -> st.SearchStrategy[bytes]:
    if wire_type == 0:
        return st.one_of(st.integers(0, 2**64 - 1).map(varint), st.just(b"\xff" * 11))  # overlong varint
    if wire_type == 1:
        return st.binary(min_size=8, max_size=8)
    if wire_type == 2:
        exact = st.binary(max_size=24).map(lambda data: varint(len(data)) + data)
        lying = st.tuples(st.integers(0, 2**31), st.binary(max_size=8)).map(lambda t: varint(t[0]) + t[1])
        return st.one_of(exact, lying)
    if wire_type == 5:
        return st.binary(min_size=4, max_size=4)
    return st.binary(max_size=4)  # 3/4: groups (start/end), 6/7: invalid wire types


def wire_strategy(descriptor: Descriptor) -> st.SearchStrategy[bytes]:
    numbers = [f.number for f in descriptor.fields] + [0, 19000, 2**29 - 1]
    record = st.tuples(st.sampled_from(numbers), st.integers(0, 7)).flatmap(
        lambda key: _payload(key[1]).map(lambda payload: wire_record(key[0], key[1], payload)))
    records = st.lists(record, min_size=1, max_size=5).map(b"".join)
    encoded = message_strategy(descriptor, 2).map(lambda m: m.SerializeToString())
    damaged = st.tuples(encoded.filter(bool), st.integers(0, 2**16), st.integers(0, 255)).map(_damage)
    return st.one_of(st.binary(min_size=1, max_size=64), records, damaged)


def _damage(case: tuple[bytes, int, int]) -> bytes:
    """Truncate an encoding or flip one of its bytes."""
    data, position, flip = case
    index = position % len(data)
    if flip % 2:
        return data[:index] if index else data[:-1]
    return data[:index] + bytes([data[index] ^ (flip | 1)]) + data[index + 1:]


# -- near-valid: one mutation of a valid example ----------------------------------------------

Path = tuple[FieldDescriptor, ...]


def field_paths(descriptor: Descriptor, max_depth: int = 4) -> list[Path]:
    """Every field path from `descriptor` down to `max_depth` levels (Structs are leaves)."""
    paths: list[Path] = []

    def walk(current: Descriptor, prefix: Path) -> None:
        for field in current.fields:
            path = (*prefix, field)
            paths.append(path)
            nested = field.type == FD.TYPE_MESSAGE and not is_map(field)
            if nested and len(path) < max_depth and field.message_type.full_name not in STRUCT_TYPES:
                walk(field.message_type, path)
    walk(descriptor, ())
    return paths


def path_name(path: Path) -> str:
    return ".".join(field.name for field in path)


def mutate(example: Message, path: Path, value: Any) -> Message:
    """A copy of `example` with the field at `path` replaced by `value` (the first element of
    a repeated message on the way; one is added when the list is empty)."""
    copy = type(example)()
    copy.CopyFrom(example)
    target = copy
    for field in path[:-1]:
        container = getattr(target, field.name)
        if field.is_repeated:
            target = container[0] if len(container) else container.add()
        else:
            target = container
    assign(target, path[-1], value)
    return copy


def mutation_strategy(example: Message, depth: int = 2) -> st.SearchStrategy[tuple[str, Message]]:
    """(mutated field path, the mutated copy of `example`)."""
    paths = field_paths(example.DESCRIPTOR)
    return st.sampled_from(paths).flatmap(lambda path: field_strategy(path[-1], depth).map(
        lambda value: (path_name(path), mutate(example, path, value))))
