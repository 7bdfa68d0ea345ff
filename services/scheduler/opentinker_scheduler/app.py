"""Wiring: the scheduler's domain objects built on two Redis clients (one for blocking reads)."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio

from opentinker_runtime.auth.api_keys import ApiKeyStore
from opentinker_runtime.core.redis_store import Keys
from opentinker_scheduler.allocator import Allocator
from opentinker_scheduler.artifact_service import ArtifactService, metrics_source
from opentinker_scheduler.artifacts import ArtifactStore
from opentinker_scheduler.clock import Clock, SystemClock
from opentinker_scheduler.config import SchedulerConfig
from opentinker_scheduler.event_log import EventLog
from opentinker_scheduler.envhosts import EnvHostDirectory
from opentinker_scheduler.job_store import JobStore
from opentinker_scheduler.job_tokens import JobTokenIssuer
from opentinker_scheduler.jobs import JobService
from opentinker_scheduler.leases import LeaseTable
from opentinker_scheduler.lifecycle import Lifecycle
from opentinker_scheduler.lua import Scripts
from opentinker_scheduler.pool import WorkerPool
from opentinker_scheduler.queue_view import QueueReader
from opentinker_scheduler.tenant_admin import TenantAdmin
from opentinker_scheduler.tenants import TenantStore
from opentinker_scheduler.watch_streams import LiveStreams
from opentinker_scheduler.workers import WorkerRegistry

SUSPECT_TTL_SHARE = 0.5
"""The share of the worker TTL a worker may go unheard before it gets no new lease (QueueReader):
half the TTL is several missed heartbeats (5 s, 2.5 of them, by default)."""


@dataclass(frozen=True, kw_only=True)
class Scheduler:
    config: SchedulerConfig
    jobs: JobService
    pool: WorkerPool
    allocator: Allocator
    tenant_admin: TenantAdmin
    tokens: JobTokenIssuer
    artifacts: ArtifactService


def build_scheduler(client: redis.asyncio.Redis, blocking_client: redis.asyncio.Redis, *,
                    config: SchedulerConfig, clock: Clock | None = None,
                    keys: Keys | None = None, service_key: str = "") -> Scheduler:
    """`blocking_client` must have no socket timeout (it serves WatchJob's XREAD BLOCK).
    `service_key` (OPENTINKER_API_KEY) keys the job tokens; replicas must share it."""
    clock, keys = clock or SystemClock(), keys or Keys()
    scripts = Scripts.register(client, max_events_per_job=config.max_events_per_job)
    store = JobStore(client=client, keys=keys, scripts=scripts, clock=clock,
                     request_id_ttl_s=config.request_id_ttl_s, aging_ms=config.queue_aging_ms)
    tenants = TenantStore(client=client, keys=keys, clock=clock)
    leases = LeaseTable(client=client, keys=keys, scripts=scripts, clock=clock)
    registry = WorkerRegistry(client=client, keys=keys, scripts=scripts, clock=clock)
    directory = EnvHostDirectory(registry=registry, max_per_tenant=config.max_envhosts_per_tenant)
    lifecycle = Lifecycle(store=store)
    tokens = JobTokenIssuer.for_service_key(service_key)
    events = EventLog(client=client, blocking_client=blocking_client, keys=keys,
                      block_ms=config.watch_block_ms, queue_events=config.watch_queue_events,
                      streams=LiveStreams(tenant_cap=config.max_watch_streams_per_tenant,
                                          admin_cap=config.max_admin_watch_streams))
    pool = WorkerPool(config=config, registry=registry, store=store, leases=leases, lifecycle=lifecycle,
                      tokens=tokens, envhosts=directory)
    reader = QueueReader(client=client, keys=keys, scripts=scripts, clock=clock,
                         coordinator_capacity=config.coordinator_capacity, gateway_capacity=config.gateway_capacity,
                         suspect_after_ms=int(SUSPECT_TTL_SHARE * config.worker_ttl_ms))
    allocator = Allocator(config=config, store=store, leases=leases, workers=registry,
                          lifecycle=lifecycle, reader=reader, tokens=tokens, on_workers=directory.snapshot.saw)
    jobs = JobService(config=config, store=store, events=events, leases=leases, lifecycle=lifecycle,
                      envhosts=directory, on_queued=allocator.queued, admissions=allocator)
    admin = TenantAdmin(tenants=tenants, api_keys=ApiKeyStore(client=client, keys=keys))
    artifacts = ArtifactService(jobs=jobs, store=ArtifactStore(
        checkpoint_root=config.checkpoint_root, tenant_data_dir=config.tenant_data_dir,
        metrics_of=metrics_source(events)))
    return Scheduler(config=config, jobs=jobs, pool=pool, allocator=allocator, tenant_admin=admin,
                     tokens=tokens, artifacts=artifacts)
