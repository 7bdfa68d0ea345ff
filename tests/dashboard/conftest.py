"""One local stack and one dashboard process shared by the dashboard tests. The stack is the
session pool's default one (harness/stack_pool.py), shared with the other tests that ask for it:
the tests here make their own jobs and tenants and read only those."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from opentinker.client import SchedulerClient
from harness.stack import LocalStack
from harness.stack_pool import StackPool
from harness.stack_spec import DEFAULT
from tests.dashboard._dashboard import DashboardProcess


@pytest.fixture(scope="package")
def stack(stack_pool: StackPool) -> Iterator[LocalStack]:
    with stack_pool.lease(DEFAULT) as local:
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
