"""Redis connection and the one place that names every Redis key. No business logic here.

Every key starts with `ot:` so an OpenTinker deployment can share a Redis with other software
and `redis-cli --scan --pattern 'ot:*'` shows exactly our state.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
import structlog

from opentinker_runtime.core.errors import RedisUnavailableError
from opentinker_runtime.core.redaction import mask_url_credentials

log = structlog.get_logger(__name__)

REDIS_DOWN_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


DEFAULT_MAX_CONNECTIONS = 100
DEFAULT_POOL_WAIT_SECONDS = 2.0


class RedisPoolExhausted(redis.exceptions.MaxConnectionsError):
    """Every connection of this process's pool stayed in use for the whole wait: the process is
    busy, Redis itself may be fine. (A ConnectionError subclass, so code that treats any
    connection problem as retryable still does; say "busy", never "Redis is down", for it.)"""

    def __init__(self, max_connections: int, wait_seconds: float | None) -> None:
        super().__init__(f"all {max_connections} connections of this process's Redis pool stayed in "
                         f"use for {wait_seconds} s")
        self.max_connections, self.wait_seconds = max_connections, wait_seconds


class WaitingConnectionPool(redis.asyncio.BlockingConnectionPool):
    """At most `max_connections`; a command finding them all in use waits up to `timeout` seconds
    for one, then raises RedisPoolExhausted (redis-py's own pool fails at once with "Too many
    connections", a ConnectionError indistinguishable from Redis being down).

    While nobody waits, an idle connection is taken and given back directly: redis-py's path
    (a condition, a timeout, its metrics hooks) cost about a third of a command's CPU. Once a
    command waits for a connection, every take and give-back goes through that path again, so
    waiters are served in turn and woken by each give-back."""

    _waiting = 0

    async def get_connection(self, *args: object, **kwargs: object):  # noqa: ANN201
        if self._available_connections and not self._waiting and not self._in_maintenance:
            connection = self._available_connections.pop()
            self._in_use_connections.add(connection)
            try:
                await self.ensure_connection(connection)
            except BaseException:
                await self.release(connection)
                raise
            return connection
        self._waiting += 1
        try:
            return await super().get_connection(*args, **kwargs)
        except redis.exceptions.ConnectionError as error:
            if isinstance(error.__cause__, asyncio.TimeoutError):
                raise RedisPoolExhausted(self.max_connections, self.timeout) from None
            raise
        finally:
            self._waiting -= 1

    async def release(self, connection: redis.asyncio.connection.AbstractConnection) -> None:
        if self._waiting or self._in_maintenance:
            await super().release(connection)
            return
        self._in_use_connections.remove(connection)
        if connection.should_reconnect():
            await connection.disconnect()
        self._available_connections.append(connection)


class _DirectSend:
    """Sends a command without a task: redis-py wraps every write in `asyncio.wait_for`, which
    runs it as a task of its own (and the caller resumes two event-loop turns later), although
    writing a command to a connected socket never waits unless its buffer is full. Only then
    does this wait for room, within the socket timeout. Mixed into the pool's connection class."""

    async def send_packed_command(self, command: bytes | str | Iterable[bytes], check_health: bool = True) -> None:
        writer = self._writer
        if (writer is None or not self.is_connected or (check_health and self.health_check_interval)
                or writer.transport.is_closing()):
            await super().send_packed_command(command, check_health)  # connects, checks health, ...
            return
        if isinstance(command, str):
            command = command.encode()
        if isinstance(command, bytes):
            command = [command]
        try:
            writer.writelines(command)
            if writer.transport.get_write_buffer_size():  # the socket took only part of it
                await asyncio.wait_for(writer.drain(), self.socket_timeout)
        except asyncio.TimeoutError:
            await self.disconnect(nowait=True)
            raise redis.exceptions.TimeoutError("Timeout writing to socket") from None
        except OSError as error:
            await self.disconnect(nowait=True)
            raise redis.exceptions.ConnectionError(f"Error while writing to socket: {error}") from error
        except BaseException:
            await self.disconnect(nowait=True)  # a write cut short leaves the connection unusable
            raise


@functools.cache
def _direct_sending(connection_class: type) -> type:
    """`connection_class` (plain, TLS or unix socket, as the URL says) sending with `_DirectSend`."""
    return type(f"DirectSend{connection_class.__name__}", (_DirectSend, connection_class), {})


def connect(url: str, *, socket_timeout: float | None = 5.0, password: str | None = None,
            max_connections: int = DEFAULT_MAX_CONNECTIONS,
            pool_timeout: float = DEFAULT_POOL_WAIT_SECONDS) -> redis.asyncio.Redis:
    """A lazily connecting client for `url` (OPENTINKER_REDIS_URL) that returns bytes.

    `socket_timeout` bounds every command; pass None (or more than the BLOCK time) for clients
    that issue blocking reads such as XREAD BLOCK. `password` (settings.redis_password, from
    OPENTINKER_REDIS_PASSWORD_FILE) is used when the URL carries none. At most
    `max_connections` are open at once; a command finding them all busy waits up to
    `pool_timeout` seconds for one, then raises RedisPoolExhausted.
    """
    pool = WaitingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=pool_timeout, decode_responses=False,
        socket_timeout=socket_timeout, password=password, socket_connect_timeout=5.0,
        retry=reconnecting_retry(), retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError])
    pool.connection_class = _direct_sending(pool.connection_class)
    return redis.asyncio.Redis.from_pool(pool)


def reconnecting_retry() -> Retry:
    """After a Redis restart every pooled connection is dead; a command that meets one
    reconnects and runs again (3 tries, 50 ms to 0.5 s apart) instead of failing. Our writes
    are Lua scripts that check state or request ids first, so a repeat is refused or a no-op."""
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=3)


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Exponential backoff between retries: initial, initial*factor, ... capped at max_seconds."""

    initial_seconds: float = 0.1
    factor: float = 2.0
    max_seconds: float = 2.0

    def delays(self) -> Iterator[float]:
        """An endless sequence of delays in seconds."""
        for attempt in itertools.count():
            yield min(self.max_seconds, self.initial_seconds * self.factor**attempt)


async def ping(client: redis.asyncio.Redis) -> bool:
    """True when Redis answers PING (or every pooled connection is busy), False when it is
    unreachable."""
    try:
        return bool(await client.ping())
    except RedisPoolExhausted:
        log.warning("redis_pool_busy", redis=describe_connection(client))
        return True  # every connection is in use, so Redis was answering: busy, not down
    except REDIS_DOWN_ERRORS:
        return False


async def ping_until_ready(client: redis.asyncio.Redis, *, backoff: Backoff = Backoff(),
                           max_attempts: int | None = None) -> int:
    """PING until Redis answers, logging a warning per failure; returns the attempts used.

    Raises RedisUnavailableError after `max_attempts` failures (None: retry forever).
    """
    url = describe_connection(client)
    for attempt, delay in enumerate(backoff.delays(), start=1):
        if await ping(client):
            return attempt
        if max_attempts is not None and attempt >= max_attempts:
            raise RedisUnavailableError(f"Redis at {url} did not answer PING after {attempt} attempts")
        log.warning("redis_unreachable", redis=url, attempt=attempt, retry_in_seconds=delay)
        await asyncio.sleep(delay)
    raise AssertionError("unreachable: Backoff.delays() is endless")


def describe_connection(client: redis.asyncio.Redis) -> str:
    """`redis://host:port/db` of a client, without credentials, for log lines."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    address = f"redis://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
    return mask_url_credentials(address)


_WHITESPACE = re.compile(r"\s")
"""What str.isspace() calls whitespace (for str patterns, re's \\s is the same Unicode test)."""


def _part(name: str, value: str | int) -> str:
    text = str(value)
    if not text or _WHITESPACE.search(text):
        raise ValueError(f"Redis key part {name}={value!r} must be non-empty without whitespace")
    return text


@dataclass(frozen=True, kw_only=True)
class Keys:
    """Builders for every Redis key OpenTinker uses. `Keys()` uses the `ot:` prefix.

    Layout (P = prefix, default `ot:`):
      P job:{job_id}                          hash: the job record
      P job:{job_id}:events                   stream: the job's events (WatchJob), ids `<seq>-0`
      P job:{job_id}:metrics                  hash: latest value of each reported metric
      P job:{job_id}:request:{request_id}     string: idempotency record of ReportJobEvents
      P job:{job_id}:stopping                 set: workers still to be told to stop (cancel)
      P jobs                                  sorted set: every job id by submission order
      P jobs:counter                          counter: submission order of jobs
      P jobs:running                          set: ids of RUNNING jobs
      P queue                                 sorted set: QUEUED job ids by priority, then FIFO
      P tenant:{tenant}:jobs                  sorted set: a tenant's job ids by submission order
      P tenant:{tenant}:request:{request_id}  hash: idempotency record of a SubmitJob
      P tenant:{tenant}                       hash: the tenant record
      P tenants                               set: every tenant id
      P apikey:{key_id}                       hash: API key record (salt + hash of the secret)
      P tenant:{tenant}:apikeys               set: ids of a tenant's API keys
      P worker:{worker_id}                    hash: a registered worker (expire_at = liveness)
      P workers                               sorted set: worker ids by heartbeat expiry
      P worker-slots:{worker_id}              hash: slot (device id or slot:N) -> "<expire_at>|<lease_id>"
      P lease-record:{lease_id}               hash: one lease (job, worker, slots, token, expiry)
      P leases:job:{job_id}                   set: lease ids a job holds
      P leases:worker:{worker_id}             set: lease ids held on a worker
      P leases:expiry                         sorted set: lease ids by expiry time (ms)
      P fencing                               counter: monotonically increasing fencing tokens
      P allocator:lock                        string: the one scheduler allowed to allocate
      P allocator:wake                        pub/sub channel: "a job was queued or devices freed"
      P event-hub:{hub_id}:wake               stream: wakes a scheduler's blocking event read (1 entry, expires)
      P tenant-usage                          hash: `<tenant>:queued|jobs|devices` counters
    """

    prefix: str = "ot:"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{_part('job_id', job_id)}"

    def job_events(self, job_id: str) -> str:
        return f"{self.job(job_id)}:events"

    def event_hub_wake(self, hub_id: str) -> str:
        return f"{self.prefix}event-hub:{_part('hub_id', hub_id)}:wake"

    def job_metrics(self, job_id: str) -> str:
        return f"{self.job(job_id)}:metrics"

    def job_request(self, job_id: str, request_id: str) -> str:
        return f"{self.job(job_id)}:request:{_part('request_id', request_id)}"

    def job_stopping(self, job_id: str) -> str:
        return f"{self.job(job_id)}:stopping"

    def job_index(self) -> str:
        return f"{self.prefix}jobs"

    def job_counter(self) -> str:
        return f"{self.prefix}jobs:counter"

    def running_jobs(self) -> str:
        return f"{self.prefix}jobs:running"

    def job_queue(self) -> str:
        return f"{self.prefix}queue"

    def tenant_job_index(self, tenant_id: str) -> str:
        return f"{self.tenant(tenant_id)}:jobs"

    def idempotency(self, tenant_id: str, request_id: str) -> str:
        return f"{self.tenant(tenant_id)}:request:{_part('request_id', request_id)}"

    def tenant(self, tenant_id: str) -> str:
        return f"{self.prefix}tenant:{_part('tenant_id', tenant_id)}"

    def tenant_index(self) -> str:
        return f"{self.prefix}tenants"

    def api_key(self, key_id: str) -> str:
        """Keyed by the key's public id; its secret is stored only salted and hashed."""
        return f"{self.prefix}apikey:{_part('key_id', key_id)}"

    def tenant_api_keys(self, tenant_id: str) -> str:
        return f"{self.tenant(tenant_id)}:apikeys"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}worker:{_part('worker_id', worker_id)}"

    def worker_index(self) -> str:
        return f"{self.prefix}workers"

    def worker_slots(self, worker_id: str) -> str:
        return f"{self.prefix}worker-slots:{_part('worker_id', worker_id)}"

    def lease_key_prefixes(self) -> dict[str, str]:
        """What Lua scripts append a lease or worker id to: `record`, `worker_leases`, `slots`."""
        return {"record": f"{self.prefix}lease-record:", "worker_leases": f"{self.prefix}leases:worker:",
                "slots": f"{self.prefix}worker-slots:"}

    def job_leases(self, job_id: str) -> str:
        return f"{self.prefix}leases:job:{_part('job_id', job_id)}"

    def lease(self, lease_id: str) -> str:
        return f"{self.prefix}lease-record:{_part('lease_id', lease_id)}"

    def worker_leases(self, worker_id: str) -> str:
        return f"{self.prefix}leases:worker:{_part('worker_id', worker_id)}"

    def lease_expiry(self) -> str:
        return f"{self.prefix}leases:expiry"

    def fencing_counter(self) -> str:
        return f"{self.prefix}fencing"

    def allocator_lock(self) -> str:
        return f"{self.prefix}allocator:lock"

    def allocator_wake(self) -> str:
        return f"{self.prefix}allocator:wake"

    def tenant_usage(self) -> str:
        return f"{self.prefix}tenant-usage"
