"""One local stack and one dashboard process shared by the dashboard tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from opentinker.client import SchedulerClient
from tests._stack import LocalStack
from tests.dashboard._dashboard import DashboardProcess


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("dashboard-stack")) as local:
        yield local


@pytest.fixture(scope="package")
def dashboard(stack: LocalStack) -> Iterator[DashboardProcess]:
    """A dashboard of the tests' own (not the one `opentinker up` started: these tests stop it),
    started with the stack's admin key (requests without a key use it)."""
    process = DashboardProcess(stack.address("scheduler"), api_key=stack.api_key,
                               log_path=stack.state_dir / "logs" / "dashboard-under-test.log", cwd=stack.state_dir)
    try:
        yield process
    finally:
        process.terminate()


@pytest.fixture(scope="package")
def scheduler(stack: LocalStack) -> Iterator[SchedulerClient]:
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as client:
        yield client

