"""Write the Tinker SDK's wire schema (`tinker_public.proto`) as .proto text, from the descriptor the
installed `tinker` package carries, and compile it for the gateway.

    .venv/bin/python scripts/vendor_tinker_proto.py

The SDK ships only the generated `tinker/proto/tinker_public_pb2.py` (Apache-2.0). The gateway must not
import the client SDK, so it keeps its own copy of the schema: services/gateway/opentinker_gateway/wire/.
Run again when the pinned SDK version changes; the test tests/gateway/test_wire_schema.py checks the copy
against the installed SDK's descriptor.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[1]
WIRE_DIR = ROOT / "services" / "gateway" / "opentinker_gateway" / "wire"
PROTO_NAME = "tinker_public.proto"
SCALARS = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
    9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64",
}
TYPE_MESSAGE, TYPE_ENUM = 11, 14
LABEL_REPEATED = 3


def sdk_descriptor() -> descriptor_pb2.FileDescriptorProto:
    from tinker.proto import tinker_public_pb2

    proto = descriptor_pb2.FileDescriptorProto()
    tinker_public_pb2.DESCRIPTOR.CopyToProto(proto)
    return proto


def render(proto: descriptor_pb2.FileDescriptorProto, sdk_version: str) -> str:
    lines = [f"// The Tinker SDK's wire schema, rendered from tinker {sdk_version}'s descriptor",
             "// (scripts/vendor_tinker_proto.py; the SDK is Apache-2.0). Do not edit by hand.",
             f'syntax = "{proto.syntax or "proto2"}";', "", f"package {proto.package};", ""]
    for enum in proto.enum_type:
        lines += render_enum(enum, "")
    for message in proto.message_type:
        lines += render_message(message, "", proto.package)
    return "\n".join(lines) + "\n"


def render_enum(enum: descriptor_pb2.EnumDescriptorProto, indent: str) -> list[str]:
    body = [f"{indent}  {value.name} = {value.number};" for value in enum.value]
    return [f"{indent}enum {enum.name} {{", *body, f"{indent}}}", ""]


def render_message(message: descriptor_pb2.DescriptorProto, indent: str, package: str) -> list[str]:
    maps = {nested.name: nested for nested in message.nested_type if nested.options.map_entry}
    lines = [f"{indent}message {message.name} {{"]
    for nested in message.enum_type:
        lines += render_enum(nested, indent + "  ")
    for nested in message.nested_type:
        if not nested.options.map_entry:
            lines += render_message(nested, indent + "  ", package)
    real_oneofs = {i for i, _ in enumerate(message.oneof_decl)
                   if not any(f.proto3_optional and f.oneof_index == i for f in message.field)}
    for index, field in enumerate(message.field):
        if field.HasField("oneof_index") and field.oneof_index in real_oneofs:
            if _first_of_oneof(message, index):
                lines += _render_oneof(message, field.oneof_index, indent, package, maps)
            continue
        lines.append(f"{indent}  {_field_line(field, package, maps)}")
    return [*lines, f"{indent}}}", ""]


def _first_of_oneof(message: descriptor_pb2.DescriptorProto, index: int) -> bool:
    oneof = message.field[index].oneof_index
    return all(not (f.HasField("oneof_index") and f.oneof_index == oneof) for f in message.field[:index])


def _render_oneof(message: descriptor_pb2.DescriptorProto, oneof: int, indent: str, package: str,
                  maps: dict) -> list[str]:
    members = [f for f in message.field if f.HasField("oneof_index") and f.oneof_index == oneof]
    body = [f"{indent}    {_field_line(f, package, maps)}" for f in members]
    return [f"{indent}  oneof {message.oneof_decl[oneof].name} {{", *body, f"{indent}  }}"]


def _field_line(field: descriptor_pb2.FieldDescriptorProto, package: str, maps: dict) -> str:
    type_name = _type_name(field, package)
    entry = maps.get(type_name.rsplit(".", 1)[-1]) if field.type == TYPE_MESSAGE else None
    if entry is not None and field.label == LABEL_REPEATED:
        key, value = entry.field
        return f"map<{_type_name(key, package)}, {_type_name(value, package)}> {field.name} = {field.number};"
    prefix = "repeated " if field.label == LABEL_REPEATED else "optional " if field.proto3_optional else ""
    return f"{prefix}{type_name} {field.name} = {field.number};"


def _type_name(field: descriptor_pb2.FieldDescriptorProto, package: str) -> str:
    if field.type in (TYPE_MESSAGE, TYPE_ENUM):
        return field.type_name.removeprefix(f".{package}.")
    return SCALARS[field.type]


def main() -> int:
    from importlib.metadata import version

    WIRE_DIR.mkdir(parents=True, exist_ok=True)
    (WIRE_DIR / PROTO_NAME).write_text(render(sdk_descriptor(), version("tinker")))
    command = [sys.executable, "-m", "grpc_tools.protoc", f"-I{WIRE_DIR}", f"--python_out={WIRE_DIR}",
               f"--pyi_out={WIRE_DIR}", str(WIRE_DIR / PROTO_NAME)]
    subprocess.run(command, check=True)
    print(f"wrote {WIRE_DIR / PROTO_NAME} and its Python module")
    return 0


if __name__ == "__main__":
    sys.exit(main())
