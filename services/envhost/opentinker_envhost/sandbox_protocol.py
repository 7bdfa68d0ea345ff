"""The wire between the EnvHost and its game processes (no grpc, no asyncio).

Session socket (EnvHost <-> one game process): length-prefixed frames, a 4-byte big-endian
length then that many bytes of UTF-8 JSON. The EnvHost sends one request and reads one reply:

    {"call": "construct", "config": {...}}            -> {"ok": null}
    {"call": "reset", "arguments": {...}}             -> {"ok": {system_prompt, initial_user_message, observation}}
    {"call": "step", "action": "...", "seat_kwargs": {...}} -> {"ok": {observation, reward, done, info}}
    {"call": "close"}                                 -> {"ok": null}, then the process exits 0
    {"call": "close", "keep": true}                   -> {"ok": {"reusable": bool}}; the process
        exits unless reusable, else waits for the next "construct" (a warm process: `sandbox_pool`)

or, when the game raised, {"error": {"kind", "raised", "message", "traceback"}} with kind one
of ERROR_KINDS. JSON, not pickle: the EnvHost never runs code a game sent it.

Control socket (EnvHost <-> the fork server, SOCK_SEQPACKET: one JSON message per packet):
the EnvHost sends {"hello": {...}} once, then {"spawn": game, "id": n} with the game process's
session socket and output pipe attached (SCM_RIGHTS), and {"kill": pid}; the fork server answers
{"ready": {...}}, {"spawned": n, "pid": pid} or {"spawn_failed": n, "error": "..."}, and reports
{"exited": pid, "status": wait_status} for every game process it reaps.
"""

from __future__ import annotations

import json
import os
import signal
import struct
from typing import Any

try:
    import orjson
except ImportError:  # pinned in requirements/stack.txt; the standard library does the same work slower
    orjson = None  # type: ignore[assignment]

HEADER = struct.Struct(">I")
MAX_CONTROL_PACKET = 1 << 20
MIN_FRAME_LIMIT = 16 << 20
READ_CHUNK = 1 << 16
EXIT_MEMORY = 75
"""Exit code of a game process whose game raised MemoryError (its memory limit was hit)."""
EXIT_SANDBOX_FAILED = 70
"""Exit code of a game process whose serving code failed (its traceback is in its output)."""

ERROR_KINDS = ("raised", "not_your_turn", "config")
"""How a game call failed: the game raised, raised NotYourTurn, or raised GameConfigError."""


class ProtocolError(Exception):
    """A peer sent something that is not a valid message (or one over the size limit)."""


def frame_limit(max_observation_chars: int) -> int:
    """Largest reply frame accepted: room for three maximal observations in UTF-8 and an info
    dict, at least MIN_FRAME_LIMIT."""
    return max(MIN_FRAME_LIMIT, 16 * max_observation_chars)


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
FAST_CALLS = frozenset({"step", "close"})
"""Calls whose requests hold only text, integers and booleans (no float that could be NaN)."""


def encode(message: Any) -> bytes:
    """JSON as UTF-8 (UnicodeEncodeError for text UTF-8 cannot hold). NaN passes (a Struct in a
    request may hold one, as in thread mode); results are checked for it on arrival."""
    return _ENCODER.encode(message).encode("utf-8")


def encode_calls(requests: list[dict[str, Any]]) -> bytes:
    """`encode` of a batch of calls: by orjson (~20x faster here) when every call is a step or a
    close, whose requests hold no float (orjson would write NaN as null), else as `encode`."""
    if orjson is not None and all(request.get("call") in FAST_CALLS for request in requests):
        try:
            return orjson.dumps(requests)
        except TypeError:  # JSONEncodeError: text that is not UTF-8, an integer past 64 bits
            pass
    return encode(requests)


def encode_results(message: Any) -> bytes:
    """`encode` of a game process's replies, by orjson when it can: what a game returned was
    checked to be finite JSON before it is sent, so no NaN is lost; anything orjson refuses (an
    integer past 64 bits, text that is not UTF-8) is encoded as `encode` does (and fails as it
    does)."""
    if orjson is not None:
        try:
            return orjson.dumps(message)
        except TypeError:
            pass
    return encode(message)


def decode(payload: bytes) -> Any:
    """One message (ProtocolError when it is not UTF-8 JSON). By orjson when it can; what orjson
    refuses (NaN, an integer past 64 bits) is read as the standard library reads it."""
    if orjson is not None:
        try:
            return orjson.loads(payload)
        except ValueError:  # JSONDecodeError
            pass
    try:
        return json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProtocolError(f"not UTF-8 JSON: {error}") from None


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


def frame_length(header: bytes, limit: int) -> int:
    """The payload length a header announces; ProtocolError past `limit`."""
    (length,) = HEADER.unpack(header)
    if length > limit:
        raise ProtocolError(f"sent a reply of {length} bytes; the limit is {limit}")
    return length


class FrameReader:
    """Frames from a blocking fd, read in chunks (one read per frame when the peer sends one
    frame at a time)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def next(self) -> bytes | None:
        """The next frame's payload; None at end of stream (ProtocolError inside a frame)."""
        while True:
            if len(self.buffer) >= HEADER.size:
                (length,) = HEADER.unpack_from(self.buffer)
                end = HEADER.size + length
                if len(self.buffer) >= end:
                    payload = bytes(self.buffer[HEADER.size:end])
                    del self.buffer[:end]
                    return payload
            chunk = os.read(self.fd, READ_CHUNK)
            if not chunk:
                if self.buffer:
                    raise ProtocolError("the stream ended inside a frame")
                return None
            self.buffer += chunk


def write_blocking(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def describe_exit(status: int | None, *, memory_limit_mb: int, cpu_seconds: float) -> tuple[str, str]:
    """(what happened to a game process, metric kind) from its wait status (None: unknown)."""
    if status is None:
        return "ended (its exit status is unknown)", "crashed"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number in (signal.SIGPROF, signal.SIGXCPU):
            return f"exceeded its CPU-time limit of {cpu_seconds:g}s per call", "cpu_limit"
        name = _signal_name(number)
        if number == signal.SIGKILL:
            return (f"was killed by {name} (the kernel's out-of-memory killer or another process)",
                    "crashed")
        return f"was killed by signal {name}", "crashed"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    if code == EXIT_MEMORY:
        return f"exceeded its memory limit of {memory_limit_mb} MiB (MemoryError)", "memory_limit"
    if code == EXIT_SANDBOX_FAILED:
        return f"failed outside the game (exit code {code}; see its last output)", "crashed"
    return f"exited with code {code}", "crashed"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
