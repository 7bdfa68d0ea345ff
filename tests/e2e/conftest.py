"""One local stack (real processes via `opentinker up`) shared by the end-to-end tests: the
session pool's default stack (harness/stack_pool.py), which tests of other directories that ask
for the default spec share too. Tests that kill or add processes (test_requeue.py,
test_multi_agent_failure.py) or read a fresh worker's log (test_data_parallel_job.py) start a
private stack of their own."""

from collections.abc import Iterator

import pytest

from opentinker.client import SchedulerClient
from opentinker.client.credentials import API_KEY_ENV
from harness.stack import LocalStack
from harness.stack_pool import StackPool
from harness.stack_spec import DEFAULT


@pytest.fixture(scope="package")
def stack(stack_pool: StackPool) -> Iterator[LocalStack]:
    """The stack runs with API-key auth; clients here find its admin key in OPENTINKER_API_KEY."""
    with stack_pool.lease(DEFAULT) as local, pytest.MonkeyPatch.context() as patch:
        patch.setenv(API_KEY_ENV, local.api_key)
        yield local


@pytest.fixture
def scheduler(stack: LocalStack) -> Iterator[SchedulerClient]:
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as client:
        yield client
