"""The process edge (`run_service`): a taken port is refused before the plan is built, so a
Trainer or Rollout does not import torch first to find out."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import ClassVar

from opentinker_runtime.core.entrypoint import EXIT_CONFIG, run_service
from opentinker_runtime.core.server import ServerPlan
from opentinker_runtime.core.settings import ServiceSettings, port_setting


@dataclass(frozen=True, kw_only=True)
class ProbeSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TESTPROBE_"
    port: int = port_setting(0)


def test_a_taken_port_exits_2_without_building_the_plan(capsys) -> None:  # noqa: ANN001
    built: list[ProbeSettings] = []

    async def build_plan(settings: ProbeSettings) -> ServerPlan:
        built.append(settings)
        return ServerPlan(services=[])

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        code = run_service(ProbeSettings, build_plan, service="probe",
                           environ={"OPENTINKER_TESTPROBE_PORT": str(port), "OPENTINKER_AUTH": "disabled"})
    assert code == EXIT_CONFIG
    assert built == []
    logged = capsys.readouterr()
    assert f"127.0.0.1:{port}" in logged.out + logged.err
    assert "OPENTINKER_TESTPROBE_PORT" in logged.out + logged.err
