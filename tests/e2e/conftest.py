"""One local stack (real processes via `opentinker up`) shared by the end-to-end tests."""

from collections.abc import Iterator

import pytest

from opentinker.client import SchedulerClient
from tests._stack import LocalStack


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(tmp_path_factory.mktemp("e2e-stack"))
    local.up()
    try:
        yield local
    finally:
        local.down()


@pytest.fixture
def scheduler(stack: LocalStack) -> Iterator[SchedulerClient]:
    with SchedulerClient(stack.address("scheduler"), timeout=30) as client:
        yield client
