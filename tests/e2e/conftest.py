"""One local stack (real processes via `opentinker up`) shared by the end-to-end tests."""

import os
from collections.abc import Iterator

import pytest

from opentinker.client import SchedulerClient
from opentinker.client.credentials import API_KEY_ENV
from tests._stack import LocalStack


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The stack runs with API-key auth; clients here find its admin key in OPENTINKER_API_KEY."""
    local = LocalStack(tmp_path_factory.mktemp("e2e-stack"))
    local.up()
    previous = os.environ.get(API_KEY_ENV)
    os.environ[API_KEY_ENV] = local.api_key
    try:
        yield local
    finally:
        if previous is None:
            os.environ.pop(API_KEY_ENV, None)
        else:
            os.environ[API_KEY_ENV] = previous
        local.down()


@pytest.fixture
def scheduler(stack: LocalStack) -> Iterator[SchedulerClient]:
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as client:
        yield client
