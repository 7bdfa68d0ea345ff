"""Check the Buf-style rules of our API on compiled descriptors.

    python scripts/lint_protos.py [PROTO_ROOT]   # prints violations, exit 1 if any

Rules: proto3; package `opentinker.<area>.v1` in folder `opentinker/<area>/v1`;
lower_snake file names; services end in `Service` and live in `<area>_service.proto`;
every RPC `Foo` takes `FooRequest` and returns `FooResponse`, used by no other RPC;
PascalCase messages and enums, lower_snake fields; enum values UPPER_SNAKE with
the enum's prefix and a `<PREFIX>_UNSPECIFIED = 0`; `List*` RPCs page with
page_size / page_token / next_page_token; Submit*/Create* requests carry a request_id.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

PASCAL = re.compile(r"^[A-Z][A-Za-z0-9]*$")
LOWER_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
UPPER_SNAKE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")
PACKAGE = re.compile(r"^opentinker\.([a-z][a-z0-9]*)\.v[0-9]+$")
IDEMPOTENT_PREFIXES = ("Submit", "Create")


def compile_descriptors(proto_root: Path) -> list[descriptor_pb2.FileDescriptorProto]:
    files = sorted(str(p.relative_to(proto_root)) for p in proto_root.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "descriptors.pb"
        args = ["protoc", f"-I{proto_root}", f"-I{include}", f"--descriptor_set_out={out}", *files]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc could not compile {proto_root}")
        descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return list(descriptor_set.file)


def upper_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def check_file(fd: descriptor_pb2.FileDescriptorProto) -> Iterator[str]:
    if fd.syntax != "proto3":
        yield f"{fd.name}: syntax must be proto3"
    match = PACKAGE.match(fd.package)
    if not match:
        yield f"{fd.name}: package {fd.package!r} must look like opentinker.<area>.v1"
    elif str(Path(fd.name).parent) != fd.package.replace(".", "/"):
        yield f"{fd.name}: folder must mirror package {fd.package!r}"
    if not LOWER_SNAKE.match(Path(fd.name).stem):
        yield f"{fd.name}: file name must be lower_snake_case"
    for service in fd.service:
        yield from check_service(fd, service)
    for enum in fd.enum_type:
        yield from check_enum(fd.name, enum)
    for message in fd.message_type:
        yield from check_message(fd.name, message)


def check_service(fd: descriptor_pb2.FileDescriptorProto, service) -> Iterator[str]:
    where = f"{fd.name}: service {service.name}"
    if not service.name.endswith("Service") or not PASCAL.match(service.name):
        yield f"{where}: name must be PascalCase and end in 'Service'"
    area = fd.package.split(".")[1] if fd.package.count(".") >= 2 else ""
    if Path(fd.name).name != f"{area}_service.proto":
        yield f"{where}: must live in {area}_service.proto"
    for method in service.method:
        if not PASCAL.match(method.name):
            yield f"{where}.{method.name}: RPC names must be PascalCase"
        for kind, type_name in (("Request", method.input_type), ("Response", method.output_type)):
            expected = f".{fd.package}.{method.name}{kind}"
            if type_name != expected:
                yield f"{where}.{method.name}: {kind.lower()} type must be {expected[1:]}, not {type_name[1:]}"


def check_enum(where: str, enum, parent: str = "") -> Iterator[str]:
    name = f"{parent}{enum.name}"
    prefix = upper_snake(enum.name) + "_"
    if not PASCAL.match(enum.name):
        yield f"{where}: enum {name} must be PascalCase"
    if not enum.value or enum.value[0].number != 0 or enum.value[0].name != f"{prefix}UNSPECIFIED":
        yield f"{where}: enum {name} must start with {prefix}UNSPECIFIED = 0"
    for value in enum.value:
        if not value.name.startswith(prefix) or not UPPER_SNAKE.match(value.name):
            yield f"{where}: enum value {name}.{value.name} must be UPPER_SNAKE with prefix {prefix}"


def check_message(where: str, message, parent: str = "") -> Iterator[str]:
    name = f"{parent}{message.name}"
    if message.options.map_entry:
        return
    if not PASCAL.match(message.name):
        yield f"{where}: message {name} must be PascalCase"
    for field in message.field:
        if not LOWER_SNAKE.match(field.name):
            yield f"{where}: field {name}.{field.name} must be lower_snake_case"
    for enum in message.enum_type:
        yield from check_enum(where, enum, parent=f"{name}.")
    for nested in message.nested_type:
        yield from check_message(where, nested, parent=f"{name}.")


def check_rpc_shapes(files: list[descriptor_pb2.FileDescriptorProto]) -> Iterator[str]:
    messages = {
        f".{fd.package}.{m.name}": m for fd in files for m in fd.message_type
    }
    used_by: dict[str, str] = {}
    for fd in files:
        for service in fd.service:
            for method in service.method:
                rpc = f"{service.name}.{method.name}"
                for type_name in (method.input_type, method.output_type):
                    if type_name in used_by:
                        yield f"{rpc}: {type_name[1:]} is already used by {used_by[type_name]}"
                    used_by[type_name] = rpc
                yield from check_rpc_fields(rpc, method, messages)


def check_rpc_fields(rpc: str, method, messages: dict) -> Iterator[str]:
    request, response = messages.get(method.input_type), messages.get(method.output_type)
    if request is None or response is None:
        return
    request_fields = {f.name for f in request.field}
    if method.name.startswith("List"):
        for field in ("page_size", "page_token"):
            if field not in request_fields:
                yield f"{rpc}: List requests need {field}"
        if "next_page_token" not in {f.name for f in response.field}:
            yield f"{rpc}: List responses need next_page_token"
    if method.name.startswith(IDEMPOTENT_PREFIXES) and "request_id" not in request_fields:
        yield f"{rpc}: {method.name} must take a request_id for idempotent retries"


def lint(proto_root: Path) -> list[str]:
    files = [fd for fd in compile_descriptors(proto_root) if fd.package.startswith("opentinker.")]
    violations = [v for fd in files for v in check_file(fd)]
    violations.extend(check_rpc_shapes(files))
    return violations


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "protos"
    violations = lint(root)
    for violation in violations:
        print(violation)
    print(f"{len(violations)} violation(s) in {root}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
