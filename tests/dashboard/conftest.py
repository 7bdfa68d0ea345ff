"""One local stack and one dashboard process shared by the dashboard tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from opentinker.client import SchedulerClient
from tests._stack import LocalStack
from tests.dashboard._dashboard import DashboardProcess


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path_factory.mktemp("dashboard-stack"))
    local.up()
    try:
        yield local
    finally:
        local.down()


@pytest.fixture(scope="package")
def dashboard(stack: LocalStack) -> Iterator[DashboardProcess]:
    """The dashboard, started with the stack's admin key (requests without a key use it)."""
    process = DashboardProcess(stack.address("scheduler"), api_key=stack.api_key,
                               log_path=stack.state_dir / "logs" / "dashboard.log", cwd=stack.state_dir)
    try:
        yield process
    finally:
        process.terminate()


@pytest.fixture(scope="package")
def scheduler(stack: LocalStack) -> Iterator[SchedulerClient]:
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as client:
        yield client

