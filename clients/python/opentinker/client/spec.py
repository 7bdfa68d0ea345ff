"""Job specs from YAML or dicts, with enum short names (`type: RL`, `function: PPO_CLIP`).

    spec = load_job_spec("job.yaml")
    spec = job_spec_from_dict({"type": "RL", "policy": {"model": {"builtin": {"name": "tiny-llama"}}}})

Field names follow the proto (snake_case); an unknown field or a bad value raises
`SpecError` naming its path, e.g. `spec.training.group_sise`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import descriptor, json_format

from opentinker.api.scheduler.v1 import job_pb2


class SpecError(ValueError):
    """The job spec is malformed; the message names the field path."""


def _expand_enum(field: descriptor.FieldDescriptor, value: Any, path: str) -> Any:
    if not isinstance(value, str):
        return value
    names = field.enum_type.values_by_name
    if value in names:
        return value
    prefix = field.enum_type.values[0].name.removesuffix("UNSPECIFIED")
    candidate = prefix + value.upper()
    if candidate in names:
        return candidate
    allowed = ", ".join(n.removeprefix(prefix) for n in names if not n.endswith("UNSPECIFIED"))
    raise SpecError(f"{path}: {value!r} is not one of {allowed}")


def _expand_value(field: descriptor.FieldDescriptor, value: Any, path: str) -> Any:
    if field.enum_type is not None:
        if field.is_repeated and isinstance(value, list):
            return [_expand_enum(field, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return _expand_enum(field, value, path)
    message = field.message_type
    if message is None or message.full_name.startswith("google.protobuf.") or message.GetOptions().map_entry:
        return value
    if field.is_repeated and isinstance(value, list):
        return [_expand_message(message, v, f"{path}[{i}]") for i, v in enumerate(value)]
    return _expand_message(message, value, path)


def _expand_message(message: descriptor.Descriptor, data: Any, path: str) -> Any:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping, got {type(data).__name__}")
    expanded = {}
    for key, value in data.items():
        field = message.fields_by_name.get(key) or message.fields_by_camelcase_name.get(key)
        if field is None:
            known = ", ".join(sorted(message.fields_by_name))
            raise SpecError(f"{path}.{key}: unknown field (known: {known})")
        expanded[key] = _expand_value(field, value, f"{path}.{key}")
    return expanded


def job_spec_from_dict(data: dict) -> job_pb2.JobSpec:
    expanded = _expand_message(job_pb2.JobSpec.DESCRIPTOR, data, "spec")
    try:
        return json_format.ParseDict(expanded, job_pb2.JobSpec())
    except json_format.ParseError as error:
        raise SpecError(f"spec: {error}") from error


def load_job_spec(path: str | Path) -> job_pb2.JobSpec:
    import yaml  # only needed for files

    text = Path(path).read_text()
    data = yaml.safe_load(text)
    if isinstance(data, dict) and "spec" in data and isinstance(data["spec"], dict):
        data = data["spec"]
    return job_spec_from_dict(data or {})
