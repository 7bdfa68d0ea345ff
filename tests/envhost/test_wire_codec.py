"""The game-process wire's JSON (sandbox_protocol): the fast codec (orjson) where it is exact, the
standard library's wherever orjson would change or refuse a message, and the same errors."""

from __future__ import annotations

import json
import math

import pytest

from opentinker_envhost import sandbox_protocol as wire


def test_the_package_pins_the_fast_codec() -> None:
    assert wire.orjson is not None, "orjson is pinned in requirements/stack.txt and the EnvHost's package"


def test_a_batch_of_steps_and_closes_round_trips_exactly() -> None:
    calls = [{"call": "step", "action": "héllo \u2603 \"quoted\"", "seat_kwargs": {"seat": "white"}, "slot": 3},
             {"call": "close", "slot": 4, "keep": True}]
    payload = wire.encode_calls(calls)
    assert payload == wire.orjson.dumps(calls)  # the fast codec wrote it
    assert wire.decode(payload) == calls


@pytest.mark.parametrize("call", ["reset", "construct"])
def test_a_float_a_tenant_sent_keeps_its_nan_in_calls_the_fast_codec_would_change(call: str) -> None:
    arguments = {"temperature": float("nan"), "index": 7}
    calls = [{"call": "step", "action": "a", "seat_kwargs": {}, "slot": 0},
             {"call": call, "arguments": arguments, "config": arguments, "slot": 1}]
    decoded = wire.decode(wire.encode_calls(calls))
    assert math.isnan(decoded[1]["arguments"]["temperature"]) and decoded[1]["arguments"]["index"] == 7
    assert decoded[0] == calls[0]


def test_results_past_what_the_fast_codec_takes_are_sent_as_the_standard_library_sends_them() -> None:
    replies = [{"ok": {"observation": "x", "reward": 1.0, "done": False, "info": {"big": 2 ** 70}}, "s": 1e-05}]
    decoded = wire.decode(wire.encode_results(replies))
    assert decoded == replies and decoded[0]["ok"]["info"]["big"] == 2 ** 70


def test_results_keep_the_standard_library_errors() -> None:
    loop: dict[str, object] = {}
    loop["self"] = loop
    with pytest.raises(ValueError):
        wire.encode_results({"ok": loop})
    with pytest.raises(UnicodeEncodeError):
        wire.encode_results({"ok": "lone \ud800 surrogate"})


def test_decoding_reads_what_only_the_standard_library_reads_and_refuses_the_rest() -> None:
    assert math.isnan(wire.decode(b'{"ok": NaN}')["ok"])
    assert wire.decode(json.dumps({"n": 2 ** 80}).encode()) == {"n": 2 ** 80}
    with pytest.raises(wire.ProtocolError, match="not UTF-8 JSON"):
        wire.decode(b'{"ok": "\xff"}')
    with pytest.raises(wire.ProtocolError, match="not UTF-8 JSON"):
        wire.decode(b"{not json")
