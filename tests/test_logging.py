"""Structured logging: JSON lines with ISO timestamps and the service name, no secrets."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime

import pytest
import structlog

from opentinker_runtime.core.logging import configure_logging
from opentinker_runtime.core.redaction import is_secret_key, mask_url_credentials


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """A stream the logging is configured to write to; global logging restored afterwards."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    stream = io.StringIO()
    yield stream
    structlog.reset_defaults()
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_iso_timestamp_level_service_and_event(captured: io.StringIO) -> None:
    configure_logging("info", "json", service="scheduler", stream=captured)
    structlog.get_logger("test").info("job_submitted", job_id="j1")
    [line] = lines(captured)
    assert line["event"] == "job_submitted" and line["job_id"] == "j1"
    assert line["level"] == "info" and line["service"] == "scheduler"
    assert datetime.fromisoformat(line["timestamp"]).tzinfo is not None
    assert list(line)[:4] == ["timestamp", "level", "service", "event"]


def test_level_filters_lower_events(captured: io.StringIO) -> None:
    configure_logging("warning", "json", service="s", stream=captured)
    log = structlog.get_logger("test")
    log.info("dropped")
    log.warning("kept")
    assert [line["event"] for line in lines(captured)] == ["kept"]


def test_stdlib_records_are_rendered_the_same_way(captured: io.StringIO) -> None:
    configure_logging("info", "json", service="trainer", stream=captured)
    logging.getLogger("grpc._cython").warning("socket %s closed", "x")
    [line] = lines(captured)
    assert line["event"] == "socket x closed" and line["service"] == "trainer"
    assert line["logger"] == "grpc._cython" and line["level"] == "warning"


def test_secrets_are_redacted_at_any_depth(captured: io.StringIO) -> None:
    configure_logging("info", "json", service="s", stream=captured)
    structlog.get_logger().info(
        "call", api_key="sk-1", password="pw", token="t", auth_token="a",
        headers={"Authorization": "Bearer b", "x-request-id": "r"},
        metadata=[("x-api-key", "k"), ("tenant", "acme")],
        redis="redis://:hunter2@redis:6379/0", max_tokens=128, fencing_token=7,
        next_page_token="p2")
    [line] = lines(captured)
    raw = captured.getvalue()
    for secret in ("sk-1", "pw\"", "Bearer b", "hunter2", "\"k\""):
        assert secret not in raw
    assert line["api_key"] == line["password"] == line["token"] == line["auth_token"] == "***"
    assert line["headers"] == {"Authorization": "***", "x-request-id": "r"}
    assert line["metadata"] == [["x-api-key", "***"], ["tenant", "acme"]]
    assert line["redis"] == "redis://***@redis:6379/0"
    assert (line["max_tokens"], line["fencing_token"], line["next_page_token"]) == (128, 7, "p2")


def test_secrets_in_exception_text_are_masked(captured: io.StringIO) -> None:
    configure_logging("info", "json", service="s", stream=captured)
    try:
        raise ConnectionError("cannot reach redis://user:hunter2@redis:6379")
    except ConnectionError:
        structlog.get_logger().exception("failed")
    [line] = lines(captured)
    assert "ConnectionError" in line["exception"] and "hunter2" not in line["exception"]


def test_console_format_is_human_readable(captured: io.StringIO) -> None:
    configure_logging("debug", "console", service="envhost", stream=captured)
    structlog.get_logger().debug("session_opened", session="s1", secret="x")
    text = captured.getvalue()
    assert "session_opened" in text and "session=s1" in text and "service=envhost" in text
    assert "secret=***" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


@pytest.mark.parametrize(("key", "secret"), [
    ("authorization", True), ("Authorization", True), ("x-api-key", True), ("api_key", True),
    ("apiKey", True), ("password", True), ("db_password", True), ("client_secret", True),
    ("token", True), ("access_token", True), ("refresh-token", True), ("credentials", True),
    ("max_tokens", False), ("prompt_tokens", False), ("fencing_token", False),
    ("page_token", False), ("eos_token", False), ("tokenizer", False), ("job_id", False),
])
def test_is_secret_key(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_mask_url_credentials_keeps_everything_else() -> None:
    assert mask_url_credentials("redis://127.0.0.1:6390/0") == "redis://127.0.0.1:6390/0"
    assert mask_url_credentials("a rediss://u:p@h:1/2 b") == "a rediss://***@h:1/2 b"
