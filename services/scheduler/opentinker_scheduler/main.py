"""Entry point of the Scheduler service: parse settings, build, serve, stop gracefully.

The scheduler starts NOT_SERVING and becomes SERVING once Redis answers; it never exits
because Redis is down, it keeps retrying with backoff and logs a warning per failed try.
The allocator loop runs as a start hook beside the health tracker.
"""

from functools import partial

import redis.asyncio
import structlog

from opentinker_runtime.core.entrypoint import run_service
from opentinker_runtime.auth.api_keys import ApiKeyStore
from opentinker_runtime.core.redis_store import connect, ping_until_ready
from opentinker_runtime.core.server import HealthReporter, ServerPlan
from opentinker_scheduler.allocator import Allocator
from opentinker_scheduler.app import build_scheduler
from opentinker_runtime.core.heap import settle_heap_once_started
from opentinker_scheduler.metrics import ClusterGauges
from opentinker_scheduler.redis_health import track_redis_health
from opentinker_scheduler.servicer import scheduler_service_binding
from opentinker_scheduler.settings import SchedulerSettings

SERVICE_NAME = "scheduler"
log = structlog.get_logger(__name__)


async def build_plan(settings: SchedulerSettings) -> ServerPlan:
    """Host the SchedulerService and its allocator; report SERVING only while Redis answers.
    /metrics reads the queue, leases and workers from Redis when scraped (ClusterGauges)."""
    password = settings.redis_password
    client = connect(settings.redis_url, password=password, max_connections=settings.redis_max_connections,
                     pool_timeout=settings.redis_pool_wait_seconds)
    blocking_client = connect(settings.redis_url, socket_timeout=None, password=password)  # XREAD BLOCK
    scheduler = build_scheduler(client, blocking_client, config=settings.domain_config(),
                                service_key=settings.api_key)
    watch_redis = partial(track_redis_health, client, check_seconds=settings.redis_check_seconds)
    hooks = [watch_redis, partial(run_allocator, scheduler.allocator, blocking_client), settle_heap_once_started]
    if settings.auth_enabled:
        hooks.append(partial(install_service_key, client, settings.api_key))
    gauges = ClusterGauges(settings.redis_url, password=password)
    return ServerPlan(services=[scheduler_service_binding(scheduler)], serving_at_start=False,
                      start_hooks=hooks, close_hooks=[client.aclose, blocking_client.aclose, gauges.aclose],
                      admin_only=False, collectors=[gauges])


async def install_service_key(client: redis.asyncio.Redis, api_key: str, health: HealthReporter) -> None:
    """A start hook: once Redis answers, store OPENTINKER_API_KEY (hashed) as an admin key, so
    every OpenTinker process holding it can call every other one."""
    await ping_until_ready(client)
    record = await ApiKeyStore(client=client).ensure(api_key, description="service key (OPENTINKER_API_KEY)")
    log.info("service_key_installed", key_id=record.key_id, tenant_id=record.tenant_id)


async def run_allocator(allocator: Allocator, subscriber: redis.asyncio.Redis, health: HealthReporter) -> None:
    """A start hook: the allocator loop (woken through `subscriber`) until shutdown cancels it."""
    await allocator.run_forever(subscriber)


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(SchedulerSettings, build_plan, service=SERVICE_NAME)
