"""Every path-like and address-like field of every request of every service, from the descriptors.

A field is one (`FieldRef`) when it is a string whose name ends with path, _dir, _file or address,
is `envhost` (an EnvHost by name or id), ends with checkpoint_id (or is a map of them), belongs to
`LocalModel`, or is one of NAMES_A_FILE; a google.protobuf.Struct named `config` (a game's config)
is one through its file-like keys (`opentinker_runtime.auth.tenant_paths.is_path_key`), named here by
`dataset_path`. Keys read like `SchedulerService.SubmitJob spec.agents[].model.local.path`:
`[]` is an element of a repeated field, `['k']` a key of a map or Struct. `put` sets such a field
in a request and `field_in_details` is how a status message names it (`[]` as `[0]`).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

import opentinker_api

PATH_LIKE = re.compile(r"(path|_dir|_file|address)$")
CHECKPOINT_LIKE = re.compile(r"checkpoint_ids?$")
NAMES_A_FILE = frozenset({"opentinker.trainer.v1.SaveCheckpointRequest.name"})
"""Fields that name a file without saying so: a checkpoint's name is part of its directory's."""
CONFIG_PATH_KEY = "dataset_path"
STRUCT = "google.protobuf.Struct"
KINDS = ("path", "checkpoint", "address", "envhost")
PART = re.compile(r"^(\w+)(\[\]|\['([^']*)'\])?$")


def field_kind(field: FieldDescriptor) -> str | None:
    """"path", "checkpoint", "address", "envhost" or None (not path- or address-like)."""
    if field.message_type is not None and field.message_type.full_name == STRUCT:
        return "path" if field.name == "config" else None
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value = field.message_type.fields_by_name["value"]
        return "checkpoint" if CHECKPOINT_LIKE.search(field.name) and value.type == value.TYPE_STRING else None
    if field.type != FieldDescriptor.TYPE_STRING:
        return None
    if field.name == "envhost":
        return "envhost"
    if field.name.endswith("address"):
        return "address"
    if CHECKPOINT_LIKE.search(field.name):
        return "checkpoint"
    if PATH_LIKE.search(field.name) or field.containing_type.name == "LocalModel" or field.full_name in NAMES_A_FILE:
        return "path"
    return None


def request_fields(descriptor: Descriptor, prefix: str = "", seen: frozenset[str] = frozenset()) -> Iterator[
        tuple[str, str]]:
    """(field path, kind) of every path- or address-like field below `descriptor`."""
    for field in descriptor.fields:
        name = prefix + field.name
        kind = field_kind(field)
        if kind is not None:
            suffix = f"['{CONFIG_PATH_KEY}']" if field.message_type is not None and field.name == "config" else (
                "['a']" if field.message_type is not None else "")
            yield name + suffix, kind
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry \
                and not field.message_type.full_name.startswith("google.protobuf.") \
                and field.message_type.full_name not in seen:
            element = "[]" if field.is_repeated else ""
            yield from request_fields(field.message_type, f"{name}{element}.", seen | {field.message_type.full_name})


def every_hostile_field() -> dict[str, str]:
    """{`<Service>.<Method> <field path>`: kind} over every service in the generated API."""
    found = {}
    for info in pkgutil.walk_packages(opentinker_api.__path__, "opentinker_api."):
        if info.name.endswith("_pb2"):
            for service in importlib.import_module(info.name).DESCRIPTOR.services_by_name.values():
                for method in service.methods:
                    for path, kind in request_fields(method.input_type, seen=frozenset({method.input_type.full_name})):
                        found[f"{service.name}.{method.name} {path}"] = kind
    return found


def put(message: Message, path: str, value: str) -> None:
    """Set the field `path` (as in the keys above) of `message` to `value`."""
    *parents, last = path.split(".")
    for part in parents:
        name, element, _ = _parse(part)
        child = getattr(message, name)
        if element:
            child = child[0] if len(child) else child.add()
        message = child
    name, _, key = _parse(last)
    if key is None:
        setattr(message, name, value)
        return
    container = getattr(message, name)
    if isinstance(container, Message) and container.DESCRIPTOR.full_name == STRUCT:
        container.update({key: value})
    else:
        container[key] = value


def _parse(part: str) -> tuple[str, bool, str | None]:
    match = PART.match(part)
    if match is None:
        raise ValueError(f"not a field path part: {part!r}")
    return match.group(1), match.group(2) == "[]", match.group(3)


def field_in_details(path: str) -> str:
    """How a status message names the field: `spec.agents[0].model.local.path`."""
    return path.replace("[]", "[0]")
