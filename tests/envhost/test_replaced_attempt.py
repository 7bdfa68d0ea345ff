"""EnvHost sessions of a replaced attempt: when a job's new attempt (its job token, checked
against the job's record in a real Redis, with auth on) opens a session, the sessions the job's
earlier attempt opened on this EnvHost are closed; other jobs' sessions are left alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.api_keys import ApiKeyStore, new_api_key
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.auth.job_tokens import (FENCING_FIELD, HASH_FIELD, JOB_TOKEN_METADATA_KEY, NONCE_FIELD,
                                        derive_job_token, hash_job_token, job_token_key)
from opentinker_runtime.core.redis_store import Keys, connect
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_envhost.servicer import envhost_service_binding
from opentinker_envhost.sessions import SessionLimits, SessionManager
from opentinker_envhost.settings import EnvHostSettings
from tests.envhost.games import catalog_with_test_games

ADMIN_KEY = new_api_key()


async def start_attempt(client, job_id: str, attempt: int) -> str:  # noqa: ANN001
    """Write the job record the Scheduler's START writes for `attempt`; its job token."""
    nonce = f"nonce-{attempt}"
    token = derive_job_token(job_token_key(ADMIN_KEY), job_id, nonce)
    await client.hset(Keys().job(job_id), mapping={"state": "RUNNING", NONCE_FIELD: nonce,
                                                    HASH_FIELD: hash_job_token(token),
                                                    FENCING_FIELD: str(attempt)})
    return token


@asynccontextmanager
async def envhost(redis_url: str) -> AsyncIterator[tuple[pb_grpc.EnvHostServiceStub, SessionManager, object]]:
    client = connect(redis_url)
    await ApiKeyStore(client=client).ensure(ADMIN_KEY, description="test admin key")
    manager = SessionManager(catalog_with_test_games(), SessionLimits(isolation="thread"))
    settings = EnvHostSettings(port=0, redis_url=redis_url, api_key=ADMIN_KEY, auth_cache_seconds=0.2)
    started = await start_server(settings, ServerPlan(services=[envhost_service_binding(manager)],
                                                      close_hooks=[manager.close_all]))
    channel = authenticated_channel(f"127.0.0.1:{started.port}", ADMIN_KEY)
    try:
        yield pb_grpc.EnvHostServiceStub(channel), manager, client
    finally:
        await channel.close()
        await stop_server(started, grace_seconds=0.5)
        await client.aclose()


async def open_for(stub: pb_grpc.EnvHostServiceStub, job_id: str, token: str) -> str:
    response = await stub.OpenSession(pb.OpenSessionRequest(env_name="echo", job_id=job_id),
                                      metadata=((JOB_TOKEN_METADATA_KEY, token),))
    return response.session_id


def test_a_new_attempts_open_closes_the_earlier_attempts_sessions(redis_url: str) -> None:
    async def scenario() -> None:
        async with envhost(redis_url) as (stub, manager, client):
            first = await start_attempt(client, "job-1", 1)
            other = await start_attempt(client, "job-2", 1)
            old = [await open_for(stub, "job-1", first) for _ in range(3)]
            kept = await open_for(stub, "job-2", other)
            assert len(manager.sessions) == 4  # the same attempt's sessions live side by side
            second = await start_attempt(client, "job-1", 2)  # the job was re-queued and restarted
            await asyncio.sleep(0.3)  # past the token cache
            new = await open_for(stub, "job-1", second)
            assert set(manager.sessions) == {new, kept}
            with pytest.raises(grpc.aio.AioRpcError) as caught:  # the old attempt is refused outright
                await open_for(stub, "job-1", first)
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert set(manager.sessions) == {new, kept} and old[0] not in manager.sessions
    asyncio.run(scenario())
