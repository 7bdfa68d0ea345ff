"""Run a service as a real subprocess (`python -m opentinker_<name>`) and probe it over gRPC."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

START_TIMEOUT_S = 30.0


@dataclass(frozen=True, kw_only=True)
class ServiceCase:
    """One of the five services, as the tests see it."""

    name: str
    area: str

    @property
    def env_prefix(self) -> str:
        return f"OPENTINKER_{self.name.upper()}_"

    @property
    def full_name(self) -> str:
        return f"opentinker.{self.name}.v1.{self.area}Service"

    def pb2(self) -> ModuleType:
        return importlib.import_module(f"opentinker_api.{self.name}.v1.{self.name}_service_pb2")

    def pb2_grpc(self) -> ModuleType:
        return importlib.import_module(f"opentinker_api.{self.name}.v1.{self.name}_service_pb2_grpc")

    def stub(self, channel: grpc.Channel) -> object:
        return getattr(self.pb2_grpc(), f"{self.area}ServiceStub")(channel)


SERVICES = (
    ServiceCase(name="scheduler", area="Scheduler"),
    ServiceCase(name="trainer", area="Trainer"),
    ServiceCase(name="rollout", area="Rollout"),
    ServiceCase(name="envhost", area="EnvHost"),
    ServiceCase(name="coordinator", area="Coordinator"),
)


def env_without_opentinker(**extra: str) -> dict[str, str]:
    """This process's environment minus any OPENTINKER_* a developer has set, plus `extra`."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("OPENTINKER_")}
    return {**clean, **extra}


class ServiceProcess:
    """A service subprocess whose stderr (its log) goes to a file."""

    def __init__(self, case: ServiceCase, *, port: int, log_path: Path, **settings: str) -> None:
        """Auth is off (OPENTINKER_AUTH=disabled) unless `settings` say otherwise."""
        env = {"OPENTINKER_AUTH": "disabled", f"{case.env_prefix}PORT": str(port), **settings}
        self.case = case
        self.address = f"127.0.0.1:{port}"
        self.log_path = log_path
        with log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", f"opentinker_{case.name}"], env=env_without_opentinker(**env),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self, service: str = "") -> str:
        """SERVING / NOT_SERVING / ..., or the gRPC code name when the call fails."""
        with grpc.insecure_channel(self.address) as channel:
            try:
                response = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=1.0)
            except grpc.RpcError as error:
                return error.code().name
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def wait_for_health(self, expected: str, *, service: str = "",
                        timeout: float = START_TIMEOUT_S) -> float:
        """Poll until health is `expected`; the seconds it took. Fails if the process dies."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.case.name} exited {self.process.returncode}:\n"
                                     f"{self.log_text()}")
            if self.health(service) == expected:
                return time.monotonic() - started
            time.sleep(0.1)
        raise AssertionError(f"{self.case.name} not {expected} after {timeout}s "
                             f"(last: {self.health(service)}):\n{self.log_text()}")

    def terminate(self, timeout: float) -> int:
        """SIGTERM and wait up to `timeout` seconds for the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def reflected_services(address: str) -> list[str]:
    """The service names server reflection lists."""
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        responses = stub.ServerReflectionInfo(iter([request]), timeout=5.0)
        return [service.name for response in responses
                for service in response.list_services_response.service]
