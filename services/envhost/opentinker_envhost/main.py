"""Entry point of the EnvHost service: parse settings, build, serve, stop gracefully."""

from __future__ import annotations

import asyncio

import structlog

from opentinker_runtime.core.entrypoint import run_service
from opentinker_runtime.core.heap import settle_heap_once_started
from opentinker_runtime.auth.job_credentials import SchedulerJobCredentials
from opentinker_runtime.workers.reaping import idle_reaper
from opentinker_runtime.core.server import HealthReporter, ServerPlan, StartHook
from opentinker_envhost.catalog import GameCatalog
from opentinker_envhost.errors import EnvHostError
from opentinker_envhost.servicer import envhost_service_binding
from opentinker_envhost.limits import Isolation, SessionLimits
from opentinker_envhost.registration import envhost_registration
from opentinker_envhost.sessions import SessionManager
from opentinker_envhost.settings import EnvHostSettings

SERVICE_NAME = "envhost"
log = structlog.get_logger(__name__)


def session_manager(settings: EnvHostSettings) -> SessionManager:
    """The manager for `settings`: the catalog of games and the session limits."""
    limits = SessionLimits(max_sessions=settings.max_sessions,
                           call_timeout_s=settings.call_timeout_seconds,
                           idle_ttl_s=settings.session_ttl_seconds,
                           unclaimed_ttl_s=settings.unclaimed_session_ttl_seconds,
                           max_observation_chars=settings.max_observation_chars,
                           isolation=Isolation(settings.isolation),
                           memory_limit_mb=settings.memory_limit_mb,
                           cpu_seconds_per_call=settings.cpu_seconds_per_call,
                           warm_processes=settings.warm_processes,
                           sessions_per_process=settings.sessions_per_process,
                           warm_idle_s=settings.warm_process_idle_seconds)
    return SessionManager(GameCatalog.from_setting(settings.games), limits)


def games_sandbox(manager: SessionManager) -> StartHook:
    """A start hook starting the games' fork server (process isolation) right away, so the first
    session does not wait for it and a game that cannot load there is logged at start-up."""
    async def start_sandbox(_health: HealthReporter) -> None:
        try:
            await manager.start()
        except EnvHostError as error:  # sessions try again when they open
            log.error("sandbox_start_failed", error=error.message)

    return start_sandbox


def reaper(manager: SessionManager) -> StartHook:
    """Closes idle and unclaimed sessions every min(TTL/4, 30 s)."""
    return idle_reaper(manager.reap_idle, manager.limits.idle_ttl_s, manager.limits.unclaimed_ttl_s)


async def build_plan(settings: EnvHostSettings) -> ServerPlan:
    """What the server hosts; peers are not dialled yet (no RPC needs them)."""
    manager = session_manager(settings)
    log.info("games_loaded", games={name: spec.source for name, spec in manager.catalog.specs.items()})
    registration = envhost_registration(settings, manager.catalog)
    credentials = job_credentials(settings)
    closers = [credentials.close] if credentials is not None else []
    return ServerPlan(services=[envhost_service_binding(manager)],
                      start_hooks=[games_sandbox(manager), reaper(manager), registration.start,
                                   settle_heap_once_started],
                      close_hooks=[registration.stop, manager.close_all, *closers],
                      accepts_job_tokens=True, job_credentials=credentials)


def job_credentials(settings: EnvHostSettings) -> SchedulerJobCredentials | None:
    """Who checks the job tokens calls carry: the Scheduler for an EnvHost a tenant serves itself
    (no Redis); None = the stack's Redis."""
    if settings.job_token_check != "scheduler" or not settings.auth_enabled:
        return None
    return SchedulerJobCredentials(settings.scheduler_address, settings.api_key, ttl_seconds=settings.auth_cache_seconds)


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(EnvHostSettings, build_plan, service=SERVICE_NAME)
