"""Job specs from YAML or dicts, with enum short names (`type: RL`, `function: PPO_CLIP`).

    spec = load_job_spec("job.yaml")
    spec = job_spec_from_dict({"type": "RL", "policy": {"model": {"builtin": {"name": "tiny-llama"}}}})

Field names follow the proto (snake_case). Everything is checked before anything is sent: an
unknown field (with the closest known name), a value of the wrong type, an enum name that does
not exist. The `SpecError` names the field's path (`spec.training.group_sise`) and, for a file,
its line and column (`job.yaml:4:3`).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import descriptor, json_format
from google.protobuf.message import Message

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client.spec_errors import FieldPath, SpecError, format_path  # noqa: F401 - the spec's errors

M = TypeVar("M", bound=Message)
_INTEGER_TYPES = {descriptor.FieldDescriptor.CPPTYPE_INT32, descriptor.FieldDescriptor.CPPTYPE_INT64,
                  descriptor.FieldDescriptor.CPPTYPE_UINT32, descriptor.FieldDescriptor.CPPTYPE_UINT64}
_FLOAT_TYPES = {descriptor.FieldDescriptor.CPPTYPE_FLOAT, descriptor.FieldDescriptor.CPPTYPE_DOUBLE}


def _expand_enum(field: descriptor.FieldDescriptor, value: Any, path: FieldPath, root: str) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value in field.enum_type.values_by_number:
        return value
    names = field.enum_type.values_by_name
    prefix = field.enum_type.values[0].name.removesuffix("UNSPECIFIED")
    allowed = ", ".join(n.removeprefix(prefix) for n in names if not n.endswith("UNSPECIFIED"))
    if not isinstance(value, str):
        raise SpecError(f"expected one of {allowed}, got {value!r}", path, root=root)
    if value in names:
        return value
    if prefix + value.upper() in names:
        return prefix + value.upper()
    raise SpecError(f"{value!r} is not one of {allowed}", path, root=root)


def _check_scalar(field: descriptor.FieldDescriptor, value: Any, path: FieldPath, root: str) -> Any:
    kind = field.cpp_type
    if kind in _INTEGER_TYPES and (isinstance(value, bool) or not isinstance(value, int)):
        raise SpecError(f"expected an integer, got {value!r}", path, root=root)
    if kind in _FLOAT_TYPES and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise SpecError(f"expected a number, got {value!r}", path, root=root)
    if kind == descriptor.FieldDescriptor.CPPTYPE_BOOL and not isinstance(value, bool):
        raise SpecError(f"expected true or false, got {value!r}", path, root=root)
    if kind == descriptor.FieldDescriptor.CPPTYPE_STRING and not isinstance(value, str):
        raise SpecError(f"expected a string, got {value!r}", path, root=root)
    return value


def _expand_single(field: descriptor.FieldDescriptor, value: Any, path: FieldPath, root: str) -> Any:
    if field.enum_type is not None:
        return _expand_enum(field, value, path, root)
    message = field.message_type
    if message is None:
        return _check_scalar(field, value, path, root)
    if message.full_name == "google.protobuf.Struct" and not isinstance(value, dict):
        raise SpecError(f"expected a mapping, got {type(value).__name__}", path, root=root)
    if message.full_name.startswith("google.protobuf."):
        return value
    return _expand_message(message, value, path, root)


def _expand_value(field: descriptor.FieldDescriptor, value: Any, path: FieldPath, root: str) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        if not isinstance(value, dict):
            raise SpecError(f"expected a mapping, got {type(value).__name__}", path, root=root)
        value_field = field.message_type.fields_by_name["value"]
        return {k: _expand_single(value_field, v, (*path, k), root) for k, v in value.items()}
    if field.is_repeated:
        if not isinstance(value, list):
            raise SpecError(f"expected a list, got {type(value).__name__}", path, root=root)
        return [_expand_single(field, v, (*path, i), root) for i, v in enumerate(value)]
    return _expand_single(field, value, path, root)


def _unknown_field(message: descriptor.Descriptor, key: Any, path: FieldPath, root: str) -> SpecError:
    known = sorted(message.fields_by_name)
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return SpecError(f"unknown field ({hint}known: {', '.join(known)})", (*path, key), root=root)


def _expand_message(message: descriptor.Descriptor, data: Any, path: FieldPath, root: str) -> Any:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"expected a mapping, got {type(data).__name__}", path, root=root)
    expanded = {}
    for key, value in data.items():
        field = message.fields_by_name.get(key) or message.fields_by_camelcase_name.get(key)
        if field is None:
            raise _unknown_field(message, key, path, root)
        if value is not None:
            expanded[key] = _expand_value(field, value, (*path, key), root)
    return expanded


def message_from_dict(value: Message | dict, cls: type[M]) -> M:
    """`value` if it already is a `cls`, else parsed from its JSON-form dict (enum short names ok)."""
    if isinstance(value, cls):
        return value
    root = cls.DESCRIPTOR.name
    expanded = _expand_message(cls.DESCRIPTOR, value, (), root)
    try:
        return json_format.ParseDict(expanded, cls())
    except json_format.ParseError as error:
        raise SpecError(str(error), root=root) from error


def job_spec_from_dict(data: dict) -> job_pb2.JobSpec:
    expanded = _expand_message(job_pb2.JobSpec.DESCRIPTOR, data, (), "spec")
    try:
        return json_format.ParseDict(expanded, job_pb2.JobSpec())
    except json_format.ParseError as error:
        raise SpecError(str(error)) from error


def load_job_spec(path: str | Path) -> job_pb2.JobSpec:
    """A JobSpec from a YAML (or JSON) file; errors carry `file:line:column`."""
    from opentinker.client.spec_yaml import load_yaml_spec  # PyYAML: only needed for files

    return load_yaml_spec(Path(path), job_spec_from_dict)
