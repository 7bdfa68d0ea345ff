"""Tunables of the scheduler's domain, built from SchedulerSettings by `main` (or by tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig:
    """Times in milliseconds unless named otherwise."""

    shared_model_dir: Path | None = None
    """Where tenant keys may name local models by absolute path (None: nowhere)."""
    checkpoint_root: Path | None = None
    """The Trainer's checkpoint directory, where a job's checkpoints are listed (None: none are)."""
    tenant_data_dir: Path | None = None
    """Root of the tenant areas, where INFERENCE outputs are found (None: none are)."""

    heartbeat_interval_ms: int = 2_000
    worker_ttl_ms: int = 10_000
    """A worker with no heartbeat for this long is DEAD; leases use the same TTL."""
    dead_worker_retention_ms: int = 300_000
    """How long a DEAD worker is still listed by ListWorkers before it is forgotten."""
    coordinator_capacity: int = 8
    """Jobs one Coordinator serves at once."""
    gateway_capacity: int = 256
    """SESSION jobs (Tinker training clients and sampler hosts) one gateway drives at once."""
    request_id_ttl_s: int = 86_400
    """How long a request_id is remembered for idempotent retries."""
    allocator_interval_ms: int = 500
    watch_block_ms: int = 5_000
    """Longest single XREAD BLOCK of the EventHub (the reader of every WatchJob) before it loops."""
    max_watch_streams_per_tenant: int = 64
    """Live WatchJob streams one tenant may hold on this scheduler (tenant keys)."""
    max_admin_watch_streams: int = 1_024
    """Live WatchJob streams all admin keys together may hold (services, the dashboard)."""
    watch_queue_events: int = 1_000
    """Live events one watcher may have waiting; a slower one re-reads them from Redis."""
    queue_scan_limit: int = 200
    """Queued jobs the allocator considers per pass (highest priority first)."""
    queue_aging_ms: int = 60_000
    """Waiting this long in the queue is worth one priority point (nothing starves)."""
    max_events_per_job: int = 100_000
    """A job's event stream keeps this many of its latest events (WatchJob from before: OUT_OF_RANGE)."""
    starvation_ms: int = 300_000
    """A queued job that has waited this long without fitting stops backfilling behind it."""
    start_at_submit: bool = True
    """SubmitJob starts a job that fits the allocator's cached view in the same round trip that
    queues it (`Allocator.draft_admission`); False: every job waits for an allocator pass."""
    max_envhosts_per_tenant: int = 16
    """EnvHosts one tenant may have registered at once (its own, served with its key)."""

