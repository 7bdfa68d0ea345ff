"""Settings of the Gateway, read from OPENTINKER_GATEWAY_* variables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from opentinker_runtime.core.settings import ServiceSettings, address_setting, setting

DEFAULT_GATEWAY_PORT = 8100


def _check_catalog(value: str) -> str | None:
    from opentinker_gateway.catalog import CatalogError, parse_catalog

    try:
        parse_catalog(value)
    except CatalogError as error:
        return str(error)
    return None


@dataclass(frozen=True, kw_only=True)
class GatewaySettings(ServiceSettings):
    """The Gateway serves the Tinker REST API (HTTP) and drives SESSION jobs."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_GATEWAY_"

    host: str = setting("127.0.0.1", "Address the HTTP server binds (0.0.0.0 for all interfaces).")
    port: int = setting(DEFAULT_GATEWAY_PORT, "TCP port of the Tinker REST API (plain HTTP; 0 picks a "
                        "free port). Point the SDK at it: TINKER_BASE_URL=http://host:port.", min=0, max=65535)
    scheduler_address: str = address_setting(
        "127.0.0.1:50051", "Scheduler the gateway registers with (role GATEWAY) and submits SESSION jobs to.")
    models: str = setting(
        "", "Extra base models the Tinker API offers besides the built-ins, as NAME=SOURCE pairs separated by "
        "commas; SOURCE is builtin:<name>[:<seed>] or an absolute model directory on the workers, e.g. "
        "'HuggingFaceTB/SmolLM2-135M-Instruct=/models/smollm2,demo=builtin:tiny-llama'. Every built-in "
        "model is offered under its own name.", check=_check_catalog, optional=True, type_name="catalog")
    tokenizer_dir: Path = setting(
        Path(".opentinker/gateway/tokenizers"), "Where the built-in models' tokenizers are written at start "
        "(get_info's tokenizer_id names these directories, which AutoTokenizer loads offline).",
        type_name="path")
    session_timeout_seconds: float = setting(
        120.0, "A client session (and its training runs and samplers) ends when no heartbeat came for this "
        "long; the SDK sends one every 10 s.", positive=True)
    long_poll_seconds: float = setting(
        20.0, "How long retrieve_future waits for a result before answering 408 (the SDK asks again).",
        positive=True)
    lease_timeout_seconds: float = setting(
        600.0, "How long create_model waits for the Scheduler to lease the SESSION job's devices (the job "
        "queues behind others of the fair queue) before it fails.", positive=True)
    future_ttl_seconds: float = setting(
        3600.0, "How long a finished result waits to be retrieved before it is forgotten.", positive=True)
    call_timeout_seconds: float = setting(
        600.0, "Deadline of one call to a Trainer or Rollout (a forward_backward of a large batch).",
        positive=True)
