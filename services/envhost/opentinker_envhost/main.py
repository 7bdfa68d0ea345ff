"""Entry point of the EnvHost service: parse settings, build, serve, stop gracefully."""

from __future__ import annotations

import asyncio

import structlog

from opentinker.core.entrypoint import run_service
from opentinker.core.server import HealthReporter, ServerPlan, StartHook
from opentinker.core.worker_registration import WorkerRegistration
from opentinker_envhost.catalog import GameCatalog
from opentinker_envhost.servicer import envhost_service_binding
from opentinker_envhost.sessions import SessionLimits, SessionManager
from opentinker_envhost.settings import EnvHostSettings

SERVICE_NAME = "envhost"
MAX_REAP_INTERVAL_S = 30.0
log = structlog.get_logger(__name__)


def session_manager(settings: EnvHostSettings) -> SessionManager:
    """The manager for `settings`: the catalog of games and the session limits."""
    limits = SessionLimits(max_sessions=settings.max_sessions,
                           call_timeout_s=settings.call_timeout_seconds,
                           idle_ttl_s=settings.session_ttl_seconds,
                           max_observation_chars=settings.max_observation_chars)
    return SessionManager(GameCatalog.from_setting(settings.games), limits)


def idle_reaper(manager: SessionManager) -> StartHook:
    """A start hook closing idle sessions every min(TTL/4, 30 s)."""
    interval = min(manager.limits.idle_ttl_s / 4, MAX_REAP_INTERVAL_S)

    async def reap_forever(_health: HealthReporter) -> None:
        while True:
            await asyncio.sleep(interval)
            await manager.reap_idle()

    return reap_forever


async def build_plan(settings: EnvHostSettings) -> ServerPlan:
    """What the server hosts; peers are not dialled yet (no RPC needs them)."""
    manager = session_manager(settings)
    log.info("games_loaded", games={name: spec.source for name, spec in manager.catalog.specs.items()})
    registration = WorkerRegistration.for_settings(settings, role="envhost")
    return ServerPlan(services=[envhost_service_binding(manager)],
                      start_hooks=[idle_reaper(manager), registration.start],
                      close_hooks=[registration.stop, manager.close_all])


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(EnvHostSettings, build_plan, service=SERVICE_NAME)
