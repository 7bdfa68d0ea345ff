"""Protobuf <-> domain conversions of the EnvHost servicer."""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import json_format, struct_pb2

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_env import StepResult
from opentinker_envhost.catalog import GameSpec
from opentinker_envhost.errors import InvalidArgument
from opentinker_envhost.sessions import ResetOutcome


def struct_to_dict(struct: struct_pb2.Struct, field: str = "config") -> dict[str, Any]:
    """A Struct as a dict; JSON numbers that are whole become ints (3.0 -> 3). NaN or Infinity
    (no JSON form) is the caller's error, naming `field`."""
    flat = _flat_struct(struct)
    if flat is not None:
        return flat
    try:
        return _whole_numbers_as_ints(json_format.MessageToDict(struct))
    except ValueError as error:
        raise InvalidArgument(f"{field}: {error} (NaN and Infinity have no JSON form)") from None


def _flat_struct(struct: struct_pb2.Struct) -> dict[str, Any] | None:
    """The dict of a Struct of strings, bools and finite numbers (a reset's kwargs, on every
    episode's path), read without json_format; None for anything else."""
    values: dict[str, Any] = {}
    for key, value in struct.fields.items():
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            values[key] = value.string_value
        elif kind == "number_value" and math.isfinite(number := value.number_value):
            values[key] = int(number) if number.is_integer() else number
        elif kind == "bool_value":
            values[key] = value.bool_value
        else:
            return None
    return values


def dict_to_struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    if values:
        struct.update(values)
    return struct


def _whole_numbers_as_ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers_as_ints(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers_as_ints(item) for item in value]
    return value


def environment(spec: GameSpec) -> pb.Environment:
    return pb.Environment(name=spec.name, description=spec.description, source=spec.source,
                          multi_turn=spec.multi_turn, seats=list(spec.seats),
                          default_config=dict_to_struct(spec.default_config))


def reset_response(outcome: ResetOutcome) -> pb.ResetResponse:
    response = pb.ResetResponse(system_prompt=outcome.system_prompt,
                                initial_user_message=outcome.initial_user_message,
                                observation=outcome.observation)
    if outcome.info:
        response.info.CopyFrom(dict_to_struct(outcome.info))
    return response


def step_response(result: StepResult) -> pb.StepResponse:
    response = pb.StepResponse()
    fill_step_response(response, result)
    return response


def fill_step_response(response: pb.StepResponse, result: StepResult) -> None:
    """Set a StepResponse in place (e.g. an InteractResponse's, without a copy)."""
    response.observation = result.observation
    response.reward = result.reward
    response.done = result.done
    if result.info:  # the common case has none: no Struct to build
        response.info.update(result.info)
