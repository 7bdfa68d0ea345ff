"""Keep the scheduler's health in step with Redis: SERVING only while Redis answers PING."""

import asyncio

import redis.asyncio
import structlog

from opentinker_runtime.core.redis_store import Backoff, describe_connection, ping, ping_until_ready
from opentinker_runtime.core.server import HealthReporter

log = structlog.get_logger(__name__)


async def track_redis_health(client: redis.asyncio.Redis, health: HealthReporter, *,
                             check_seconds: float, backoff: Backoff = Backoff()) -> None:
    """Forever: wait for Redis (warning per failed try), SERVING; on a lost ping, NOT_SERVING."""
    redis_address = describe_connection(client)
    while True:
        attempts = await ping_until_ready(client, backoff=backoff)
        await health.set_serving()
        log.info("redis_ready", redis=redis_address, attempts=attempts)
        while await ping(client):
            await asyncio.sleep(check_seconds)
        await health.set_not_serving()
        log.warning("redis_lost", redis=redis_address)
