"""The Redis client's connection pool (redis_store.connect) against a real redis-server: a full
pool makes a command wait, then fail as RedisPoolExhausted ("busy"), never like Redis being down."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.exceptions

from opentinker_runtime.core.redis_store import RedisPoolExhausted, connect, ping


def test_a_command_waits_for_a_busy_pool_and_runs_once_a_connection_is_free(redis_url: str) -> None:
    async def scenario() -> None:
        async with connect(redis_url, max_connections=1, pool_timeout=5.0) as client:
            held = await client.connection_pool.get_connection()
            asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(
                client.connection_pool.release(held)))
            started = time.monotonic()
            assert await client.set("k", "v") is True
            assert 0.25 <= time.monotonic() - started < 4  # waited for the held one, did not fail

    asyncio.run(scenario())


def test_a_pool_busy_past_its_wait_raises_pool_exhausted_and_ping_still_sees_redis_up(redis_url: str) -> None:
    async def scenario() -> None:
        async with connect(redis_url, max_connections=2, pool_timeout=0.2) as client:
            held = [await client.connection_pool.get_connection() for _ in range(2)]
            with pytest.raises(RedisPoolExhausted) as raised:
                await client.get("k")
            assert str(raised.value) == "all 2 connections of this process's Redis pool stayed in use for 0.2 s"
            assert (raised.value.max_connections, raised.value.wait_seconds) == (2, 0.2)
            assert isinstance(raised.value, redis.exceptions.ConnectionError)  # still retryable everywhere
            assert await ping(client) is True  # busy, not down: the health check stays SERVING
            for connection in held:
                await client.connection_pool.release(connection)
            assert await client.get("k") is None

    asyncio.run(scenario())


def test_commands_on_idle_connections_start_no_task_of_their_own(redis_url: str) -> None:
    """redis-py ran every write as a task (asyncio.wait_for) and took every connection through a
    condition and a timeout; with an idle connection at hand a command now costs neither."""
    async def scenario() -> None:
        async with connect(redis_url) as client:
            await client.set("k", "v")
            loop, created = asyncio.get_running_loop(), []
            create_task = loop.create_task

            def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
                created.append(args[0])
                return create_task(*args, **kwargs)

            loop.create_task = counted
            try:
                for _ in range(20):
                    assert await client.get("k") == b"v"
                assert created == []
                async with client.pipeline(transaction=False) as pipe:
                    assert await pipe.get("k").set("k", "w").execute() == [b"v", True]
            finally:
                loop.create_task = create_task
            assert [c.__qualname__ for c in created] == ["WaitingConnectionPool.release"]  # redis-py shields it

    asyncio.run(scenario())


def test_a_connection_the_server_dropped_is_replaced_by_the_next_command(redis_url: str) -> None:
    async def scenario() -> None:
        async with connect(redis_url) as client, connect(redis_url) as admin:
            await client.set("k", "v")
            mine = await client.client_id()
            await admin.execute_command("CLIENT", "KILL", "ID", mine)
            await asyncio.sleep(0.05)
            assert await client.get("k") == b"v"  # written to a dead socket, then retried on a new one
            assert await client.client_id() != mine

    asyncio.run(scenario())
