"""What the local stack is made of: the five services, their default ports, who calls whom,
and the environment each process gets (the same variables docker-compose.yml sets).

Metrics ports (Prometheus /metrics): an explicit --<name>-metrics-port wins, then
--metrics-base-port + index; otherwise `AUTO_PORT`, and `opentinker up` gives the service a port
the OS reports free at start (shown by `opentinker status`). So stacks on explicit or free gRPC
ports (tests, several stacks on one machine) never fight over metrics ports; pass
--metrics-base-port for ports that stay the same across restarts (a Prometheus scrape config).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

REDIS = "redis"
DEFAULT_REDIS_PORT = 6390
DASHBOARD = "dashboard"
DEFAULT_DASHBOARD_PORT = 8080
"""The web dashboard `opentinker up` starts beside the services (a client of the Scheduler)."""
GATEWAY = "gateway"
DEFAULT_GATEWAY_PORT = 8100
"""The Tinker-compatible REST gateway (HTTP) `opentinker up` starts beside the services."""
HTTP_PROCESSES = (DASHBOARD, GATEWAY)
"""Processes whose health is GET /healthz (the rest speak gRPC health)."""


@dataclass(frozen=True, kw_only=True)
class ServiceDef:
    name: str
    """Service name; the process runs `python -m opentinker_<name>`."""
    default_port: int
    """gRPC port when neither --<name>-port nor --base-port is given."""
    compose_metrics_port: int
    """Port of /metrics in docker-compose.yml (each service its own, published as is)."""
    peers: tuple[str, ...] = ()
    """Services this one calls; each gets `OPENTINKER_<NAME>_<PEER>_ADDRESS`."""

    @property
    def module(self) -> str:
        return f"opentinker_{self.name}"

    @property
    def env_prefix(self) -> str:
        return f"OPENTINKER_{self.name.upper()}_"


SERVICES: tuple[ServiceDef, ...] = (
    ServiceDef(name="scheduler", default_port=50051, compose_metrics_port=9151),
    ServiceDef(name="trainer", default_port=50052, compose_metrics_port=9152, peers=("scheduler",)),
    ServiceDef(name="rollout", default_port=50053, compose_metrics_port=9153,
               peers=("scheduler", "envhost")),
    ServiceDef(name="envhost", default_port=50054, compose_metrics_port=9154, peers=("scheduler",)),
    ServiceDef(name="coordinator", default_port=50055, compose_metrics_port=9155,
               peers=("scheduler", "trainer", "rollout", "envhost")),
)
SERVICE_NAMES = tuple(s.name for s in SERVICES)
AUTO_PORT = 0
"""A metrics port `opentinker up` picks when it starts (one the OS reports free)."""


def resolve_ports(
    overrides: dict[str, int | None], base_port: int | None
) -> dict[str, int]:
    """Port per service: an explicit override wins, then base_port + index, then the default."""
    ports = {}
    for index, service in enumerate(SERVICES):
        explicit = overrides.get(service.name)
        if explicit is not None:
            ports[service.name] = explicit
        elif base_port is not None:
            ports[service.name] = base_port + index
        else:
            ports[service.name] = service.default_port
    return ports


def resolve_metrics_ports(overrides: Mapping[str, int | None], base_port: int | None) -> dict[str, int]:
    """Metrics port per service: an explicit override wins, then base_port + index, else AUTO_PORT."""
    ports = {}
    for index, service in enumerate(SERVICES):
        explicit = overrides.get(service.name)
        if explicit is not None:
            ports[service.name] = explicit
        else:
            ports[service.name] = base_port + index if base_port is not None else AUTO_PORT
    return ports


def metrics_url(address: str) -> str:
    """The scrape URL of a /metrics endpoint at host:port."""
    return f"http://{address}/metrics"


def connect_host(bind_host: str) -> str:
    """The address peers use to reach a server bound to `bind_host`."""
    return "127.0.0.1" if bind_host in ("", "0.0.0.0", "::", "[::]") else bind_host


CHECKPOINT_USERS = ("trainer", "rollout", "coordinator", "scheduler")
"""Services that share the checkpoint directory (OPENTINKER_CHECKPOINT_DIR)."""
TENANT_AREA_USERS = ("coordinator", "scheduler")
"""Services that resolve job paths in the tenant areas (OPENTINKER_TENANT_DATA_DIR)."""


def service_env(
    service: ServiceDef, *, host: str, ports: dict[str, int], redis_url: str, checkpoint_dir: str,
    api_key: str, advertise_host: str | None = None, metrics_ports: Mapping[str, int] | None = None,
    redis_password_file: str | None = None,
) -> dict[str, str]:
    """The OPENTINKER_* variables one service process needs.

    Workers (every service that talks to the scheduler) advertise `advertise_host:port`, the
    address the coordinator dials for them; it defaults to the address peers use here. With
    `metrics_ports` (resolved: no AUTO_PORT) the service serves /metrics on its port. With
    `redis_password_file` (docker-compose: the secret's path) it sends the password in that file.
    """
    peer_host = connect_host(host)
    env = {
        "OPENTINKER_REDIS_URL": redis_url,
        "OPENTINKER_API_KEY": api_key,
        f"{service.env_prefix}HOST": host,
        f"{service.env_prefix}PORT": str(ports[service.name]),
    }
    if redis_password_file:
        env["OPENTINKER_REDIS_PASSWORD_FILE"] = redis_password_file
    for peer in service.peers:
        env[f"{service.env_prefix}{peer.upper()}_ADDRESS"] = f"{peer_host}:{ports[peer]}"
    if "scheduler" in service.peers:
        env[f"{service.env_prefix}ADVERTISE_ADDRESS"] = f"{advertise_host or peer_host}:{ports[service.name]}"
    if service.name in CHECKPOINT_USERS:
        env["OPENTINKER_CHECKPOINT_DIR"] = checkpoint_dir
    if service.name in TENANT_AREA_USERS:  # the tenant areas lie beside the checkpoints
        env["OPENTINKER_TENANT_DATA_DIR"] = str(PurePosixPath(checkpoint_dir).parent / "tenants")
    if metrics_ports is not None:
        env[f"{service.env_prefix}METRICS_PORT"] = str(metrics_ports[service.name])
    return env


def gateway_env(*, host: str, port: int, scheduler_address: str, redis_url: str, api_key: str,
                advertise_address: str, tokenizer_dir: str, redis_password_file: str | None = None) -> dict[str, str]:
    """The OPENTINKER_* variables of the Tinker gateway (`opentinker up` and docker-compose.yml)."""
    env = {
        "OPENTINKER_REDIS_URL": redis_url, "OPENTINKER_API_KEY": api_key,
        "OPENTINKER_GATEWAY_HOST": host, "OPENTINKER_GATEWAY_PORT": str(port),
        "OPENTINKER_GATEWAY_SCHEDULER_ADDRESS": scheduler_address,
        "OPENTINKER_GATEWAY_ADVERTISE_ADDRESS": advertise_address,
        "OPENTINKER_GATEWAY_TOKENIZER_DIR": tokenizer_dir,
    }
    if redis_password_file:
        env["OPENTINKER_REDIS_PASSWORD_FILE"] = redis_password_file
    return env
