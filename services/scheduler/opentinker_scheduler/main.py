"""Entry point of the Scheduler service: parse settings, build, serve, stop gracefully.

The scheduler starts NOT_SERVING and becomes SERVING once Redis answers; it never exits
because Redis is down, it keeps retrying with backoff and logs a warning per failed try.
The allocator loop runs as a start hook beside the health tracker.
"""

from functools import partial

import redis.asyncio

from opentinker.core.entrypoint import run_service
from opentinker.core.redis_store import connect
from opentinker.core.server import HealthReporter, ServerPlan
from opentinker_scheduler.allocator import Allocator
from opentinker_scheduler.app import build_scheduler
from opentinker_scheduler.redis_health import track_redis_health
from opentinker_scheduler.servicer import scheduler_service_binding
from opentinker_scheduler.settings import SchedulerSettings

SERVICE_NAME = "scheduler"


async def build_plan(settings: SchedulerSettings) -> ServerPlan:
    """Host the SchedulerService and its allocator; report SERVING only while Redis answers."""
    client = connect(settings.redis_url)
    blocking_client = connect(settings.redis_url, socket_timeout=None)  # WatchJob's XREAD BLOCK
    scheduler = build_scheduler(client, blocking_client, config=settings.domain_config())
    watch_redis = partial(track_redis_health, client, check_seconds=settings.redis_check_seconds)
    return ServerPlan(services=[scheduler_service_binding(scheduler)], serving_at_start=False,
                      start_hooks=[watch_redis, partial(run_allocator, scheduler.allocator, blocking_client)],
                      close_hooks=[client.aclose, blocking_client.aclose])


async def run_allocator(allocator: Allocator, subscriber: redis.asyncio.Redis, health: HealthReporter) -> None:
    """A start hook: the allocator loop (woken through `subscriber`) until shutdown cancels it."""
    await allocator.run_forever(subscriber)


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(SchedulerSettings, build_plan, service=SERVICE_NAME)
