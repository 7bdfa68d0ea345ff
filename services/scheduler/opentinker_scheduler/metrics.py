"""The Scheduler's Prometheus metrics (docs/metrics.md).

Counted in this process where the work happens (`JobStore`): state changes and job events.
Read from Redis at scrape time (`ClusterGauges`, a collector): the queue, jobs by live state,
leases, leased devices and workers, so every scheduler replica reports the same cluster-wide
values and a restarted scheduler reports them at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import redis
import structlog
from prometheus_client.core import GaugeMetricFamily

from opentinker_runtime.core import metrics
from opentinker_runtime.core.redis_store import Keys

log = structlog.get_logger(__name__)

STATE_CHANGES = metrics.counter(
    "opentinker_scheduler_job_state_changes", "Jobs that entered each state (by this scheduler "
    "process; SUCCEEDED/FAILED/CANCELLED count finished jobs).", ("state",))
JOB_EVENTS = metrics.counter(
    "opentinker_scheduler_job_events", "Job events appended to jobs' event streams, by kind "
    "(state_changed, metrics, progress, log, checkpoint, worker_lost).", ("kind",))
SCRAPE_TIMEOUT_S = 2.0


def count_state_change(state: str) -> None:
    STATE_CHANGES.labels(state=state).inc()


def count_events(kind: str, count: int = 1) -> None:
    JOB_EVENTS.labels(kind=kind).inc(count)


@dataclass(frozen=True, kw_only=True)
class ClusterSnapshot:
    """What one scrape reads from Redis (one pipelined round trip)."""

    queued_jobs: int
    running_jobs: int
    active_leases: int
    registered_workers: int
    live_workers: int
    usage: Mapping[str, int]
    """tenant-usage counters summed over tenants: queued, jobs (running), devices (leased)."""


class ClusterGauges:
    """A collector: the queue, jobs by live state, leases and workers, read from Redis when
    Prometheus scrapes (with its own blocking client: scrapes run in the HTTP thread)."""

    def __init__(self, redis_url: str, keys: Keys | None = None, *, password: str | None = None) -> None:
        self.redis_url = redis_url
        self._password = password
        self.keys = keys or Keys()
        self._client: redis.Redis | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("opentinker_scheduler_redis_up", "1 when the last scrape could read "
                               "the scheduler's state from Redis, else 0.")
        try:
            snapshot = self.read()
        except redis.RedisError as error:
            log.warning("metrics_redis_unavailable", error=str(error))
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from snapshot_families(snapshot)

    def read(self, now_ms: int | None = None) -> ClusterSnapshot:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        keys = self.keys
        pipe = self._redis().pipeline(transaction=False)
        pipe.zcard(keys.job_queue()).scard(keys.running_jobs())
        pipe.zcount(keys.lease_expiry(), now_ms, "+inf")
        pipe.zcard(keys.worker_index()).zcount(keys.worker_index(), now_ms, "+inf")
        pipe.hgetall(keys.tenant_usage())
        queued, running, leases, workers, live, usage = pipe.execute()
        return ClusterSnapshot(queued_jobs=queued, running_jobs=running, active_leases=leases,
                               registered_workers=workers, live_workers=live, usage=sum_usage(usage))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        """`close` as a server close hook."""
        self.close()

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self.redis_url, password=self._password,
                                                socket_timeout=SCRAPE_TIMEOUT_S,
                                                socket_connect_timeout=SCRAPE_TIMEOUT_S)
        return self._client


def sum_usage(raw: Mapping[bytes, bytes]) -> dict[str, int]:
    """`<tenant>:<counter>` fields summed per counter over every tenant."""
    totals: dict[str, int] = {}
    for name, value in raw.items():
        counter = name.decode().rpartition(":")[2]
        totals[counter] = totals.get(counter, 0) + int(value)
    return totals


def snapshot_families(snapshot: ClusterSnapshot) -> Iterator[GaugeMetricFamily]:
    yield GaugeMetricFamily("opentinker_scheduler_queue_depth", "Jobs waiting in the queue (QUEUED).",
                            value=snapshot.queued_jobs)
    jobs = GaugeMetricFamily("opentinker_scheduler_jobs", "Jobs in each live state, cluster-wide "
                             "(finished jobs: opentinker_scheduler_job_state_changes_total).", labels=["state"])
    jobs.add_metric(["QUEUED"], snapshot.queued_jobs)
    jobs.add_metric(["RUNNING"], snapshot.running_jobs)
    yield jobs
    yield GaugeMetricFamily("opentinker_scheduler_active_leases", "Device leases held and not expired.",
                            value=snapshot.active_leases)
    yield GaugeMetricFamily("opentinker_scheduler_leased_devices", "Devices held by running jobs "
                            "(summed over tenants).", value=snapshot.usage.get("devices", 0))
    workers = GaugeMetricFamily("opentinker_scheduler_workers", "Registered workers; live = "
                                "heartbeat not expired.", labels=["liveness"])
    workers.add_metric(["registered"], snapshot.registered_workers)
    workers.add_metric(["live"], snapshot.live_workers)
    yield workers
