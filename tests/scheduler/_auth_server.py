"""The harness's scheduler served with auth on: job tokens keyed by ADMIN_KEY, the service key, as
main.py builds it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.api_keys import ApiKeyStore, new_api_key
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.core.redis_store import connect
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_scheduler.app import build_scheduler
from opentinker_scheduler.servicer import scheduler_service_binding
from opentinker_scheduler.settings import SchedulerSettings
from tests.scheduler._harness import FAST, Harness, ManualClock

ADMIN_KEY = new_api_key()


@asynccontextmanager
async def scheduler_server(redis_url: str) -> AsyncIterator[Harness]:
    """The harness's scheduler (manual clock, allocator ticked by the test) with auth on and job
    tokens keyed by ADMIN_KEY, the service key, as main.py builds it."""
    client, blocking = connect(redis_url), connect(redis_url, socket_timeout=None)
    scheduler = build_scheduler(client, blocking, config=FAST, clock=ManualClock(), service_key=ADMIN_KEY)
    await ApiKeyStore(client=client).ensure(ADMIN_KEY, description="test admin key")
    settings = SchedulerSettings(port=0, redis_url=redis_url, api_key=ADMIN_KEY, auth_cache_seconds=0.2)
    started = await start_server(settings, ServerPlan(services=[scheduler_service_binding(scheduler)],
                                                      admin_only=False))
    address = f"127.0.0.1:{started.port}"
    channel = authenticated_channel(address, ADMIN_KEY)
    try:
        yield Harness(scheduler=scheduler, stub=pb_grpc.SchedulerServiceStub(channel), address=address)
    finally:
        await channel.close()
        await stop_server(started, grace_seconds=0.2)
        await client.aclose()
        await blocking.aclose()
