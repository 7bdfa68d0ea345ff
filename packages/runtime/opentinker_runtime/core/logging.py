"""Structured logging for every service: JSON lines (or console), ISO timestamps, no secrets.

`configure_logging` sends structlog events and stdlib `logging` records (grpc, redis, ...)
through the same processors and one stderr handler, so every line a service prints has the
same shape: {"timestamp": ..., "level": ..., "service": ..., "event": ..., ...}.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor

from opentinker_runtime.core.log_bounds import clip_long_values
from opentinker_runtime.core.redaction import MASK, is_secret_key, mask_url_credentials

LEADING_KEYS = ("timestamp", "level", "service", "event", "logger")
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def configure_logging(level: str = "info", fmt: str = "json", *, service: str | None = None,
                      stream: TextIO | None = None) -> None:
    """Configure structlog and stdlib logging once per process, writing to `stream` (stderr)."""
    numeric_level = _LEVELS[level.lower()]
    shared = shared_processors(service)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer(fmt)],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric_level)


def shared_processors(service: str | None) -> list[Processor]:
    """Processors applied to structlog events and foreign stdlib records alike."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        add_service_name(service),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        redact_secrets,
        clip_long_values,  # after redaction: a clipped URL could no longer be recognised and masked
        put_standard_keys_first,
    ]


def renderer(fmt: str) -> Processor:
    """The final processor: JSON lines (default) or colourless console output."""
    if fmt == "console":
        return structlog.dev.ConsoleRenderer(colors=False)
    return structlog.processors.JSONRenderer(sort_keys=False)


def add_service_name(service: str | None) -> Processor:
    """A processor that stamps every event with `service=<name>` (if a name is given)."""

    def processor(_logger: Any, _method: str, event_dict: EventDict) -> EventDict:
        if service:
            event_dict.setdefault("service", service)
        return event_dict

    return processor


def redact_secrets(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> EventDict:
    """Mask values under secret-looking keys and passwords inside URLs, at any nesting depth."""
    return {key: _redacted(key, value) for key, value in event_dict.items()}


def put_standard_keys_first(_logger: Any, _method: str, event_dict: EventDict) -> EventDict:
    """timestamp, level, service, event, logger first: lines read well in a terminal too."""
    leading = {key: event_dict[key] for key in LEADING_KEYS if key in event_dict}
    return {**leading, **event_dict}


def _redacted(key: Any, value: Any) -> Any:
    if isinstance(key, str) and is_secret_key(key):
        return MASK
    if isinstance(value, str):
        return mask_url_credentials(value)
    if isinstance(value, Mapping):
        return {k: _redacted(k, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted_item(item) for item in value]
    return value


def _redacted_item(item: Any) -> Any:
    """List items; `(key, value)` pairs (gRPC metadata) are treated like mapping entries."""
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        return (item[0], _redacted(item[0], item[1]))
    return _redacted(None, item)
