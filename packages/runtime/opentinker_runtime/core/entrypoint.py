"""The process edge shared by every service's `main`: settings, logging, serve, exit code.

Exit codes: 0 after a graceful stop, 2 for a configuration problem (bad settings or a port
that is already taken), 1 for an unexpected crash (logged with its traceback).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import structlog

from opentinker_runtime.auth.tls import use_for_channels
from opentinker_runtime.core.errors import PortInUseError, SettingsError
from opentinker_runtime.core.logging import configure_logging
from opentinker_runtime.core.server import ServerPlan, format_address, port_env_var, port_is_taken, serve
from opentinker_runtime.core.settings import ServiceSettings, load_settings

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_CONFIG = 2

S = TypeVar("S", bound=ServiceSettings)
PlanBuilder = Callable[[S], Awaitable[ServerPlan]]


def run_service(settings_cls: type[S], build_plan: PlanBuilder[S], *, service: str,
                environ: Mapping[str, str] | None = None) -> int:
    """Load settings, configure logging, serve the plan until a stop signal; the exit code."""
    try:
        settings = load_settings(settings_cls, environ)
    except SettingsError as error:
        print(f"opentinker-{service}: {error}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level, settings.log_format, service=service)
    use_for_channels(settings.tls_files)  # before the plan opens any channel to a peer
    return _serve_logging_failures(settings, build_plan)


def _serve_logging_failures(settings: S, build_plan: PlanBuilder[S]) -> int:
    log = structlog.get_logger(__name__)
    log.info("starting", settings=settings.loggable())
    try:
        asyncio.run(_build_and_serve(settings, build_plan))
    except PortInUseError as error:
        log.error("port_in_use", address=error.address, env_var=error.env_var, error=str(error))
        return EXIT_CONFIG
    except Exception:  # noqa: BLE001 - process edge: log the crash with its traceback
        log.exception("crashed")
        return EXIT_CRASH
    return EXIT_OK


async def _build_and_serve(settings: S, build_plan: PlanBuilder[S]) -> None:
    refuse_a_taken_port(settings)
    await serve(settings, await build_plan(settings))


def refuse_a_taken_port(settings: ServiceSettings) -> None:
    """PortInUseError before the plan is built: a Trainer or Rollout imports torch and
    transformers there (~10 s of CPU), which a port someone else holds would only waste. The
    bind itself checks again (another process may take the port in between)."""
    if port_is_taken(settings.host, settings.port):
        raise PortInUseError(address=format_address(settings.host, settings.port), env_var=port_env_var(settings))
