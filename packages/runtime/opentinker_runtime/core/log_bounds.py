"""Bounded log lines: every value is clipped before it is rendered, so a caller that sends a
1 MiB id (or an error that quotes one) cannot make a service write 1 MiB lines.

Strings keep their head and tail around a marker (`…[N chars clipped]…`): the tail of an error
message or a traceback is usually the part that explains it. Collections keep their first items,
nesting is cut at a depth, and other objects are clipped by their repr. Short values pass as is.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from structlog.typing import EventDict

MAX_VALUE_CHARS = 1_000
"""A string value (or key, or repr) longer than this is clipped to about this many characters."""
MAX_TRACE_CHARS = 8_000
"""The same for rendered tracebacks (`exception`, `stack`), which are long by nature."""
TRACE_KEYS = frozenset({"exception", "stack"})
MAX_ITEMS = 20
"""Items kept of a list, tuple or mapping; a last entry says how many were left out."""
MAX_DEPTH = 4
"""Nesting kept; a deeper collection is logged as its clipped repr."""
MAX_FIELDS = 64
"""Top-level fields kept of one event (the code names them, but a splatted dict could be huge)."""
MAX_LINE_CHARS = 64 * 1024
"""What the limits above allow one rendered line at most, with room to spare (tests assert it)."""
TRACE_CHARS_BY_KEY = dict.fromkeys(TRACE_KEYS, MAX_TRACE_CHARS)
_PLAIN = (int, float, bool, type(None))


def clip_long_values(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> EventDict:
    """A structlog processor: every key and value of the event within the limits above."""
    items = list(event_dict.items())
    clipped = {clip_text(str(key)): _clip(value, TRACE_CHARS_BY_KEY.get(key, MAX_VALUE_CHARS), 0)
               for key, value in items[:MAX_FIELDS]}
    if len(items) > MAX_FIELDS:
        clipped["fields_clipped"] = len(items) - MAX_FIELDS
    return clipped


def clip_text(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """`text` itself when short; else its head and tail around `…[N chars clipped]…`."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    head = limit - tail
    return f"{text[:head]}…[{len(text) - head - tail} chars clipped]…{text[len(text) - tail:]}"


def _clip(value: Any, limit: int, depth: int) -> Any:
    if isinstance(value, str):
        return clip_text(value, limit)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (bytes, bytearray)):
        return value if len(value) <= limit else clip_text(repr(bytes(value)), limit)
    if isinstance(value, (Mapping, list, tuple)) and depth < MAX_DEPTH:
        return _clip_collection(value, depth)
    text = repr(value)
    return value if len(text) <= limit else clip_text(text, limit)


def _clip_collection(value: Mapping[Any, Any] | list[Any] | tuple[Any, ...], depth: int) -> Any:
    if isinstance(value, Mapping):
        entries = list(value.items())
        kept: Any = {_clip(k, MAX_VALUE_CHARS, depth + 1): _clip(v, MAX_VALUE_CHARS, depth + 1)
                     for k, v in entries[:MAX_ITEMS]}
        if len(entries) > MAX_ITEMS:
            kept["…"] = f"{len(entries) - MAX_ITEMS} more items"
        return kept
    kept = [_clip(item, MAX_VALUE_CHARS, depth + 1) for item in value[:MAX_ITEMS]]
    if len(value) > MAX_ITEMS:
        kept.append(f"…{len(value) - MAX_ITEMS} more items")
    return tuple(kept) if isinstance(value, tuple) else kept
