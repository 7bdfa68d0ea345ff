"""The one way every service serves gRPC: health, reflection, bind, signals, graceful stop.

A service's `main` builds a `ServerPlan` (its servicers plus optional start/close hooks) and
calls `serve(settings, plan)`, which returns after SIGTERM/SIGINT once the server has drained:
health goes NOT_SERVING, `server.stop(grace)` lets in-flight RPCs finish, close hooks run.

Every server counts and times its RPCs (`metrics_interceptor`); with `metrics_port` set it also
serves Prometheus `GET /metrics` on the same host from the moment it binds until it has stopped.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from opentinker_runtime.auth.tls import server_credentials, use_for_channels
from opentinker_runtime.core import metrics
from opentinker_runtime.core.cancellation import gather_cancelled
from opentinker_runtime.core.errors import PortInUseError
from opentinker_runtime.core.metrics_http import MetricsEndpoint
from opentinker_runtime.core.metrics_interceptor import MetricsInterceptor
from opentinker_runtime.core.settings import ServiceSettings
from opentinker_runtime.core.wire_guard import WireGuardInterceptor

log = structlog.get_logger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
BACKGROUND_STOP_SECONDS = 10.0  # a start hook that ignores its cancel longer is left behind, logged
SERVER_OPTIONS = (("grpc.so_reuseport", 0),)  # a port held by another process must fail to bind


@dataclass(frozen=True, kw_only=True)
class ServiceBinding:
    """One gRPC service to host: its full name, the servicer and the generated add_*_to_server."""

    full_name: str
    servicer: object
    add_to_server: Callable[[Any, grpc.aio.Server], None]


class HealthReporter:
    """Sets the grpc.health.v1 status of the overall server ("") and of every hosted service."""

    def __init__(self, service_names: Sequence[str]) -> None:
        self.servicer = health.aio.HealthServicer()
        self.names = ("", *service_names)

    async def set_all(self, status: int) -> None:
        for name in self.names:
            await self.servicer.set(name, status)

    async def set_serving(self) -> None:
        await self.set_all(SERVING)

    async def set_not_serving(self) -> None:
        await self.set_all(NOT_SERVING)

    async def enter_shutdown(self) -> None:
        """NOT_SERVING for good: later set_* calls are ignored."""
        await self.servicer.enter_graceful_shutdown()


StartHook = Callable[[HealthReporter], Awaitable[None]]
CloseHook = Callable[[], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class ServerPlan:
    """What a service hands to `serve`.

    start_hooks run as background tasks once the port is bound (e.g. wait for Redis, then report
    SERVING); they are cancelled on shutdown. close_hooks run last (close clients).
    """

    services: Sequence[ServiceBinding]
    start_hooks: Sequence[StartHook] = ()
    close_hooks: Sequence[CloseHook] = ()
    serving_at_start: bool = True
    options: Sequence[tuple[str, Any]] = ()
    admin_only: bool = True
    """With auth on, accept only admin (service) keys: true for the services OpenTinker's own
    processes call; the Scheduler, which users call, authorizes per RPC instead."""
    collectors: Sequence[Any] = ()
    """prometheus_client collectors read at scrape time (e.g. the Scheduler's Redis gauges),
    registered while the server runs."""
    accepts_job_tokens: bool = False
    """With auth on, a job's token (with its job id) is also a call's credential, scoped to that
    job: the EnvHost, which the services call with job tokens only (opentinker_runtime.auth.job_credentials)."""
    job_credentials: Any = None
    """A JobCredentials checking job tokens elsewhere (an EnvHost a tenant serves: the Scheduler);
    set, the server opens no Redis and accepts job tokens only, no API keys."""


@dataclass(frozen=True, kw_only=True)
class StartedServer:
    """A bound, started server and the handles needed to stop it."""

    server: grpc.aio.Server
    health: HealthReporter
    port: int
    background: list[asyncio.Task[None]] = field(default_factory=list)
    closers: list[CloseHook] = field(default_factory=list)
    metrics: MetricsEndpoint | None = None
    """The /metrics endpoint (None when `metrics_port` is 0)."""
    collectors: Sequence[Any] = ()


async def serve(settings: ServiceSettings, plan: ServerPlan, *,
                stop: asyncio.Event | None = None, handle_signals: bool = True) -> None:
    """Serve until SIGTERM/SIGINT (or until `stop` is set), then shut down gracefully."""
    stop = stop or asyncio.Event()
    if handle_signals:
        install_stop_signals(stop)
    try:
        started = await start_server(settings, plan)
        await stop.wait()
        log.info("shutdown_started", grace_seconds=settings.grace_seconds)
        await stop_server(started, grace_seconds=settings.grace_seconds)
    finally:
        await run_close_hooks(plan.close_hooks)
    log.info("shutdown_complete")


async def start_server(settings: ServiceSettings, plan: ServerPlan) -> StartedServer:
    """Build the server, bind host:port (PortInUseError if taken), start it and its hooks.

    With OPENTINKER_AUTH=api_keys every call (but health and reflection) needs an API key.
    Undecodable requests are INVALID_ARGUMENT and status messages are clipped (`wire_guard`).
    With `metrics_port` set, /metrics is served too (PortInUseError naming its variable if taken)."""
    interceptors, closers = auth_interceptors(settings, plan)
    server = grpc.aio.server(options=[*SERVER_OPTIONS, *plan.options],
                             interceptors=[MetricsInterceptor(), *interceptors, WireGuardInterceptor()])
    reporter = HealthReporter([binding.full_name for binding in plan.services])
    register_services(server, plan.services, reporter)
    tls = settings.tls_files
    use_for_channels(tls)  # this process's calls to its peers: the same mode, the same CA
    port = bind_port(server, settings.host, settings.port, port_env_var(settings),
                     credentials=server_credentials(tls) if tls.enabled else None)
    endpoint = start_metrics_endpoint(settings)
    for collector in plan.collectors:
        metrics.register_collector(collector)
    await reporter.set_all(SERVING if plan.serving_at_start else NOT_SERVING)
    await server.start()
    log.info("server_started", address=format_address(settings.host, port), tls=tls.mode,
             services=[binding.full_name for binding in plan.services],
             metrics_url=endpoint.url if endpoint else None)
    tasks = [start_background(hook(reporter)) for hook in plan.start_hooks]
    return StartedServer(server=server, health=reporter, port=port, background=tasks, closers=closers,
                         metrics=endpoint, collectors=tuple(plan.collectors))


def start_metrics_endpoint(settings: ServiceSettings) -> MetricsEndpoint | None:
    """Serve /metrics on host:metrics_port; None when metrics_port is 0 (off)."""
    if settings.metrics_port == 0:
        return None
    return MetricsEndpoint.start(settings.host, settings.metrics_port, env_var=metrics_port_env_var(settings))


def auth_interceptors(settings: ServiceSettings, plan: ServerPlan) -> tuple[list[Any], list[CloseHook]]:
    """The API-key interceptor (and its Redis client's close) when auth is on; when off, one that
    says every caller is the local admin."""
    from opentinker_runtime.auth.interceptor import AuthInterceptor, LocalPrincipalInterceptor

    label = plan.services[0].full_name.rsplit(".", 1)[-1] if plan.services else "service"
    if not settings.auth_enabled:
        log.warning("auth_disabled", detail="OPENTINKER_AUTH=disabled: anyone who reaches the port may call")
        return [LocalPrincipalInterceptor()], []
    if plan.job_credentials is not None:
        return [AuthInterceptor(None, service_label=label, admin_only=True, job_credentials=plan.job_credentials)], []
    from opentinker_runtime.auth.api_keys import ApiKeyStore, CachingVerifier  # redis: only servers with auth need it
    from opentinker_runtime.auth.job_credentials import RedisJobCredentials
    from opentinker_runtime.core.redis_store import connect

    client = connect(settings.redis_url, password=settings.redis_password)
    verifier = CachingVerifier(ApiKeyStore(client=client), ttl_seconds=settings.auth_cache_seconds)
    job_credentials = (RedisJobCredentials(verifier.job_tokens, ttl_seconds=settings.auth_cache_seconds)
                       if plan.accepts_job_tokens else None)
    return [AuthInterceptor(verifier.verify, service_label=label, admin_only=plan.admin_only,
                            job_credentials=job_credentials)], [client.aclose]


async def stop_server(started: StartedServer, *, grace_seconds: float) -> None:
    """NOT_SERVING, cancel background hooks, let in-flight RPCs finish within the grace."""
    await started.health.enter_shutdown()
    await gather_cancelled(started.background, timeout_seconds=BACKGROUND_STOP_SECONDS, what="start hooks")
    await started.server.stop(grace_seconds)
    await run_close_hooks(started.closers)
    if started.metrics is not None:  # last: a scrape during the drain still sees the final counts
        await asyncio.to_thread(started.metrics.stop)
    for collector in started.collectors:
        metrics.unregister_collector(collector)


def register_services(server: grpc.aio.Server, services: Sequence[ServiceBinding],
                      reporter: HealthReporter) -> None:
    """Add the servicers, grpc.health.v1 and server reflection listing all of them."""
    for binding in services:
        binding.add_to_server(binding.servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(reporter.servicer, server)
    names = [binding.full_name for binding in services]
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)


def bind_port(server: grpc.aio.Server, host: str, port: int, env_var: str, *,
              credentials: grpc.ServerCredentials | None = None) -> int:
    """Bind host:port without SO_REUSEPORT (with TLS when `credentials` are given); returns the
    bound port (useful when port is 0)."""
    address = format_address(host, port)
    if port_is_taken(host, port):  # checked first so grpc's C-core does not log its own error
        raise PortInUseError(address=address, env_var=env_var)
    try:
        bound = (server.add_secure_port(address, credentials) if credentials is not None
                 else server.add_insecure_port(address))
    except RuntimeError as error:  # grpc raises "Failed to bind to address ..."
        raise PortInUseError(address=address, env_var=env_var) from error
    if bound == 0:  # older grpc versions report failure by returning 0
        raise PortInUseError(address=address, env_var=env_var)
    return bound


def port_is_taken(host: str, port: int) -> bool:
    """True when some socket already listens on host:port (probed like a server binds it)."""
    if port == 0:
        return False
    try:
        candidates = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False  # grpc reports an unresolvable host when it binds
    return any(_address_in_use(family, sockaddr) for family, _, _, _, sockaddr in candidates)


def _address_in_use(family: int, sockaddr: tuple[Any, ...]) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def format_address(host: str, port: int) -> str:
    """host:port, with brackets around IPv6 literals."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def port_env_var(settings: ServiceSettings) -> str:
    """The variable that sets this service's port, for error messages."""
    return f"{type(settings).ENV_PREFIX}PORT"


def metrics_port_env_var(settings: ServiceSettings) -> str:
    """The variable that sets this service's metrics port, for error messages."""
    return f"{type(settings).ENV_PREFIX}METRICS_PORT"


def install_stop_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set `stop` instead of killing the process."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _on_signal, stop, signum)


def _on_signal(stop: asyncio.Event, signum: int) -> None:
    log.info("signal_received", signal=signal.Signals(signum).name)
    stop.set()


def start_background(coroutine: Awaitable[None]) -> asyncio.Task[None]:
    """Run a start hook as a task whose crash is logged instead of silently lost."""
    task = asyncio.ensure_future(coroutine)
    task.add_done_callback(_log_background_failure)
    return task


def _log_background_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background_task_failed", exc_info=task.exception())


async def run_close_hooks(hooks: Sequence[CloseHook]) -> None:
    """Run every close hook in order; one failing does not skip the others."""
    for hook in hooks:
        try:
            await hook()
        except Exception:  # noqa: BLE001 - shutdown edge: log and keep closing the rest
            log.exception("close_hook_failed", hook=getattr(hook, "__qualname__", repr(hook)))
