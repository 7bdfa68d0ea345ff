"""Redis connection helpers against a real redis-server, and the key layout."""

from __future__ import annotations

import asyncio
import time

import pytest

from opentinker_runtime.core.embedded_redis import free_port
from opentinker_runtime.core.errors import RedisUnavailableError
from opentinker_runtime.core.redis_store import Backoff, Keys, connect, describe_connection, ping, ping_until_ready


def test_connect_returns_bytes_and_talks_to_redis(redis_url: str) -> None:
    async def scenario() -> None:
        client = connect(redis_url)
        try:
            await client.set(Keys().job("j1"), "queued")
            assert await client.get(Keys().job("j1")) == b"queued"
            assert await ping(client) is True
            assert await ping_until_ready(client) == 1
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_ping_is_false_and_ping_until_ready_gives_up_when_redis_is_down() -> None:
    async def scenario() -> None:
        client = connect(f"redis://127.0.0.1:{free_port()}/0")
        try:
            assert await ping(client) is False
            started = time.monotonic()
            with pytest.raises(RedisUnavailableError, match="did not answer PING after 3 attempts"):
                await ping_until_ready(client, backoff=Backoff(initial_seconds=0.05), max_attempts=3)
            assert 0.15 <= time.monotonic() - started < 5  # slept 0.05 + 0.1 between the tries
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_backoff_grows_by_factor_up_to_the_cap() -> None:
    delays = Backoff(initial_seconds=0.1, factor=2, max_seconds=0.5).delays()
    assert [next(delays) for _ in range(6)] == [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]


def test_describe_connection_hides_the_password() -> None:
    client = connect("redis://:hunter2@10.0.0.9:6379/3")
    assert describe_connection(client) == "redis://10.0.0.9:6379/3"
    asyncio.run(client.aclose())


def test_every_key_starts_with_the_prefix_and_keys_do_not_collide() -> None:
    keys = Keys()
    built = [
        keys.job("j1"), keys.job_events("j1"), keys.job_index(), keys.tenant_job_index("acme"),
        keys.idempotency("acme", "req-1"), keys.tenant("acme"), keys.tenant_index(),
        keys.api_key("sha256-abc"), keys.worker("w1"), keys.worker_index(),
        keys.worker_slots("w1"), keys.job_leases("j1"), keys.fencing_counter(),
    ]
    assert all(key.startswith("ot:") for key in built)
    assert len(set(built)) == len(built)
    assert keys.job_events("j1") == "ot:job:j1:events"
    assert keys.idempotency("acme", "req-1") == "ot:tenant:acme:request:req-1"
    assert keys.worker_slots("w1") == "ot:worker-slots:w1"


def test_idempotency_keys_are_per_tenant() -> None:
    assert Keys().idempotency("acme", "r1") != Keys().idempotency("globex", "r1")


def test_custom_prefix_isolates_deployments() -> None:
    assert Keys(prefix="ot-test:").job("j1") == "ot-test:job:j1"


@pytest.mark.parametrize("bad", ["", " ", "a b", "tab\there"])
def test_empty_or_whitespace_key_parts_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="must be non-empty without whitespace"):
        Keys().job(bad)


def test_a_client_outlives_a_redis_restart_from_its_append_only_file(tmp_path) -> None:
    """SIGKILL redis-server and start it again on the same port and data: the pooled connections
    are dead, yet the next commands reconnect and find every acknowledged write (fsync always)."""
    import os
    import signal

    from opentinker_runtime.core.embedded_redis import EmbeddedRedis

    port = free_port()
    first = EmbeddedRedis(port=port, data_dir=tmp_path).start()

    async def scenario() -> None:
        client = connect(first.url)
        try:
            await asyncio.gather(*(client.set(f"ot:test:{i}", i) for i in range(20)))  # several pooled connections
            os.kill(first.pid, signal.SIGKILL)
            first._process.wait(timeout=10)  # noqa: SLF001 - reap it, so its port is free again
            second = EmbeddedRedis(port=port, data_dir=tmp_path).start()
            try:
                values = await asyncio.gather(*(client.get(f"ot:test:{i}") for i in range(20)))
                assert values == [str(i).encode() for i in range(20)]
            finally:
                second.stop()
        finally:
            await client.aclose()

    asyncio.run(scenario())
