"""`python -m opentinker_gateway`: serve the Tinker REST API until SIGTERM or Ctrl-C.

Exit codes as every service: 0 after a graceful stop, 2 for a configuration problem (bad
settings, a taken port), 1 for a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import structlog
from aiohttp import web

from opentinker_runtime.auth.tls import use_for_channels
from opentinker_runtime.core.channel_pool import ChannelPool
from opentinker_runtime.core.entrypoint import EXIT_CONFIG, EXIT_CRASH, EXIT_OK
from opentinker_runtime.core.errors import SettingsError
from opentinker_runtime.core.logging import configure_logging
from opentinker_runtime.core.server import install_stop_signals, start_metrics_endpoint
from opentinker_runtime.core.settings import load_settings
from opentinker_gateway.auth import TenantAuth
from opentinker_gateway.catalog import CatalogModel, parse_catalog
from opentinker_gateway.futures import FutureStore
from opentinker_gateway.http_app import build_app
from opentinker_gateway.records import Records
from opentinker_gateway.service import GatewayService
from opentinker_gateway.session_jobs import SessionJobs
from opentinker_gateway.sessions import ClientSessions
from opentinker_gateway.settings import GatewaySettings

log = structlog.get_logger("opentinker.gateway")
SWEEP_SECONDS = 5.0


def main() -> int:
    try:
        settings = load_settings(GatewaySettings)
    except SettingsError as error:
        print(f"opentinker-gateway: {error}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_level, settings.log_format, service="gateway")
    log.info("starting", settings=settings.loggable())
    try:
        asyncio.run(serve(settings))
    except OSError as error:
        log.error("cannot_listen", host=settings.host, port=settings.port, error=str(error),
                  env_var="OPENTINKER_GATEWAY_PORT")
        return EXIT_CONFIG
    except Exception:  # noqa: BLE001 - process edge: log the crash with its traceback
        log.exception("crashed")
        return EXIT_CRASH
    return EXIT_OK


async def serve(settings: GatewaySettings) -> None:
    from opentinker_runtime.core.redis_store import connect

    use_for_channels(settings.tls_files)  # its calls to the Scheduler, Trainers and Rollouts
    redis = connect(settings.redis_url, password=settings.redis_password)
    pool = ChannelPool(settings.api_key)
    jobs = SessionJobs(scheduler_address=settings.scheduler_address, worker_address=settings.reachable_address,
                       api_key=settings.api_key, lease_timeout=settings.lease_timeout_seconds)
    service = build_service(settings, redis, pool, jobs)
    jobs.on_stop = service.job_stopped
    runner = web.AppRunner(build_app(service, _auth(settings, redis), long_poll_seconds=settings.long_poll_seconds),
                           access_log=None, auto_decompress=False)  # zstd bodies: http_app decompresses
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port).start()
    await jobs.start()
    metrics = start_metrics_endpoint(settings)
    log.info("gateway_started", metrics_url=metrics.url if metrics else None, url=f"http://{settings.reachable_address}", scheduler=settings.scheduler_address,
             models=sorted(service.catalog))
    stop = asyncio.Event()
    install_stop_signals(stop)
    sweeper = asyncio.create_task(_sweep(service))
    await stop.wait()
    sweeper.cancel()
    await _shut_down(service, jobs, runner, pool, redis)
    if metrics is not None:
        await asyncio.to_thread(metrics.stop)


def build_service(settings: GatewaySettings, redis, pool: ChannelPool, jobs: SessionJobs) -> GatewayService:  # noqa: ANN001
    catalog = parse_catalog(settings.models)
    return GatewayService(catalog=catalog, tokenizer_dirs=write_tokenizers(catalog, settings.tokenizer_dir),
                          records=Records(redis), jobs=jobs, pool=pool,
                          futures=FutureStore(ttl_seconds=settings.future_ttl_seconds),
                          sessions=ClientSessions(timeout_seconds=settings.session_timeout_seconds),
                          call_timeout=settings.call_timeout_seconds)


def write_tokenizers(catalog: dict[str, CatalogModel], directory: Path) -> dict[str, Path]:
    """A directory AutoTokenizer loads for every model: the byte tokenizer for built-ins (written
    here), the model directory itself for local models."""
    directories: dict[str, Path] = {}
    byte_dir = directory.resolve() / "byte-tokenizer"
    if any(model.builtin for model in catalog.values()):
        from opentinker_runtime.ml.tokenizer import build_byte_tokenizer

        build_byte_tokenizer().save_pretrained(str(byte_dir))
    for name, model in catalog.items():
        directories[name] = byte_dir if model.builtin else Path(model.path)
    return directories


def _auth(settings: GatewaySettings, redis) -> TenantAuth:  # noqa: ANN001
    if not settings.auth_enabled:
        return TenantAuth(None)
    from opentinker_runtime.auth.api_keys import ApiKeyStore, CachingVerifier

    return TenantAuth(CachingVerifier(ApiKeyStore(client=redis), ttl_seconds=settings.auth_cache_seconds).verify)


async def _sweep(service: GatewayService) -> None:
    while True:
        await asyncio.sleep(SWEEP_SECONDS)
        try:
            await service.end_expired_sessions()
            service.futures.prune()
        except Exception:  # noqa: BLE001 - keep sweeping; log what went wrong
            log.exception("sweep_failed")


async def _shut_down(service: GatewayService, jobs: SessionJobs, runner: web.AppRunner, pool: ChannelPool,
                     redis) -> None:  # noqa: ANN001
    for run in service.runs.all():
        await service.close_run(run, "the gateway stopped", succeeded=False)
    service.futures.cancel_all()
    await runner.cleanup()
    with contextlib.suppress(Exception):
        await jobs.close()
    await pool.close()
    await redis.aclose()
    log.info("gateway_stopped")
