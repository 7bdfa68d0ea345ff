"""The stack spread over four "hosts" (`harness.netns`), each service on its host's own address:

    control    Redis and the Scheduler
    worker-a   a Trainer, a Rollout, an EnvHost and a Coordinator (workers)
    worker-b   the same again
    laptop     a tenant's own EnvHost (`opentinker envhost` with the tenant's key, name `laptop-games`)

    with MultiHostStack(tmp_path) as stack:
        stack.tenant_key                          # the tenant that owns the laptop's EnvHost
        stack.address("scheduler")                # "10.77.<n>.1:50051", reached from the test's namespace
        stack.net.cut("worker-a"); stack.net.restore("worker-a")

Every process runs the real service (`python -m opentinker_<service>`) with the settings a host of
its own would get: it binds and advertises its host's address (never 127.0.0.1), finds the
Scheduler and Redis on `control`, and shares the checkpoint directory (shared storage).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.netns import HostNetwork

HOSTS = ("control", "worker-a", "worker-b", "laptop")
WORKER_HOSTS = ("worker-a", "worker-b")
PORTS = {"scheduler": 50051, "trainer": 50052, "rollout": 50053, "envhost": 50054, "coordinator": 50055}
REDIS_PORT = 6379
LAPTOP_ENVHOST = "laptop-games"
TENANT = "laptop-tenant"


@dataclass(frozen=True)
class Process:
    host: str
    name: str

    @property
    def log_name(self) -> str:
        return f"{self.host}-{self.name}.log"


class MultiHostStack:
    def __init__(self, state_dir: Path, *, settings: dict[str, str] | None = None,
                 subnet_index: int | None = None, tls: str = "off") -> None:
        """`tls`: off, on or mutual, with a CA made in the state dir and one certificate naming
        every host's address (the same `opentinker up --tls` makes for one host)."""
        self.state_dir = state_dir
        self.settings = settings or {}
        self.tls = tls
        self.tls_env: dict[str, str] = {}
        self.client_tls = None
        self.net = HostNetwork(HOSTS, subnet_index=subnet_index)
        self.api_key = ""
        self.tenant_key = ""
        self.processes: dict[Process, object] = {}

    @property
    def checkpoint_dir(self) -> Path:
        return self.state_dir / "checkpoints"

    def address(self, service: str, host: str = "control") -> str:
        return f"{self.net.address(host)}:{PORTS[service]}"

    def __enter__(self) -> MultiHostStack:
        from opentinker.client.credentials import ensure_admin_key

        self.api_key = ensure_admin_key(self.state_dir)
        if self.tls != "off":
            self._make_certificates()
        self.net.__enter__()
        try:
            self._start_control()
            for host in WORKER_HOSTS:
                self._start_workers(host)
            self._wait_serving([(host, name) for host in WORKER_HOSTS for name in ("trainer", "rollout", "envhost",
                                                                                    "coordinator")])
            self._start_laptop()
        except BaseException:
            self.net.tear_down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.net.tear_down()

    def _make_certificates(self) -> None:
        from opentinker.cli.local_ca import ensure_local_ca
        from opentinker.client.tls import tls_from_env

        files = ensure_local_ca(self.state_dir, *(self.net.address(host) for host in HOSTS))
        self.tls_env = files.env(self.tls)
        client_env = dict(self.tls_env)
        if self.tls != "mutual":
            client_env = {k: v for k, v in client_env.items() if k not in ("OPENTINKER_TLS_CERT_FILE",
                                                                            "OPENTINKER_TLS_KEY_FILE")}
        self.client_tls = tls_from_env(client_env)

    def client(self, api_key: str):  # noqa: ANN201 - a SchedulerClient (imported late: the SDK)
        """A SchedulerClient of the control host's Scheduler, over this stack's TLS."""
        from opentinker.client import SchedulerClient

        return SchedulerClient(self.address("scheduler"), api_key=api_key, timeout=30, tls=self.client_tls)

    def logs(self, lines: int = 40) -> str:
        parts = []
        for path in sorted((self.state_dir / "logs").glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    # ------------------------------------------------------------ starting

    def _env(self, service: str, host: str) -> dict[str, str]:
        """The variables a service on its own host gets (topology.service_env, with peers on
        their hosts: the Scheduler on control, the rest on this host)."""
        from opentinker.cli.topology import SERVICES, service_env

        definition = next(s for s in SERVICES if s.name == service)
        env = service_env(definition, host=self.net.address(host), ports=PORTS,
                          redis_url=f"redis://{self.net.address('control')}:{REDIS_PORT}/0",
                          checkpoint_dir=str(self.checkpoint_dir), api_key=self.api_key)
        if "scheduler" in definition.peers:
            env[f"{definition.env_prefix}SCHEDULER_ADDRESS"] = self.address("scheduler")
        base = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
        return base | {"PYTHONUNBUFFERED": "1"} | env | self.tls_env | self.settings

    def _start(self, host: str, name: str, command: list[str], env: dict[str, str]) -> None:
        process = Process(host, name)
        self.processes[process] = self.net.popen(host, command, env=env,
                                                 log=self.state_dir / "logs" / process.log_name)

    def _start_control(self) -> None:
        from opentinker_runtime.core.embedded_redis import redis_server_command

        data = self.state_dir / "redis"
        data.mkdir(parents=True, exist_ok=True)
        redis = [*redis_server_command(REDIS_PORT, data), "--bind", self.net.address("control"),
                 "--protected-mode", "no", "--logfile", ""]
        self._start("control", "redis", [str(part) for part in redis], {"PATH": "/usr/bin:/bin"})
        self._wait_redis()
        self._start("control", "scheduler", [sys.executable, "-m", "opentinker_scheduler"],
                    self._env("scheduler", "control"))
        self._wait_serving([("control", "scheduler")])

    def _start_workers(self, host: str) -> None:
        for service in ("trainer", "rollout", "envhost", "coordinator"):
            self._start(host, service, [sys.executable, "-m", f"opentinker_{service}"], self._env(service, host))

    def _start_laptop(self) -> None:
        """A tenant with a key of its own, and its EnvHost on the laptop (registered with that key)."""
        with self.client(self.api_key) as admin:
            self.tenant_key = admin.create_tenant(TENANT, display_name="the laptop's owner").api_key_secret
        laptop = self.net.address("laptop")
        env = {k: v for k, v in self._env("envhost", "laptop").items() if not k.startswith("OPENTINKER_")}
        env |= {"OPENTINKER_API_KEY": self.tenant_key, "OPENTINKER_SCHEDULER": self.address("scheduler"),
                **self.tls_env}  # the tenant's EnvHost: a certificate from the stack's CA
        command = [sys.executable, "-m", "opentinker.cli.main", "envhost", "--name", LAPTOP_ENVHOST,
                   "--host", laptop, "--port", str(PORTS["envhost"]), "--advertise", f"{laptop}:{PORTS['envhost']}"]
        self._start("laptop", "envhost", command, env)
        self._wait_serving([("laptop", "envhost")])

    # ------------------------------------------------------------ waiting

    def _wait_redis(self, timeout: float = 30) -> None:
        import redis

        client = redis.Redis(host=self.net.address("control"), port=REDIS_PORT, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis on control did not answer within {timeout} s\n{self.logs()}")
                time.sleep(0.1)
        finally:
            client.close()

    def _wait_serving(self, services: list[tuple[str, str]], timeout: float = 180) -> None:
        from opentinker.cli.health_probe import SERVING, check_health

        deadline = time.monotonic() + timeout
        pending = list(services)
        while pending:
            for host, name in list(pending):
                process = self.processes[Process(host, name)]
                if process.poll() is not None:
                    raise RuntimeError(f"{name} on {host} exited with {process.returncode}\n{self.logs()}")
                if check_health(f"{self.net.address(host)}:{PORTS[name]}", timeout=1.0, tls=self.client_tls) == SERVING:
                    pending.remove((host, name))
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"not SERVING after {timeout} s: {pending}\n{self.logs()}")
            time.sleep(0.2)
