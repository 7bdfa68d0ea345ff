"""The local stack (`opentinker up`, auth on) of the security tests: job tokens, tenant
isolation, EnvHost credentials, path confinement and the secrets grep. It is the session pool's
default stack (harness/stack_pool.py), shared with the other tests that ask for the default
spec, e.g. tests/e2e and tests/dashboard. Each module creates its own tenants (names no other
module uses) and jobs, so any of them runs alone or after the others."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from opentinker.client import SchedulerClient
from harness.stack import LocalStack
from harness.stack_pool import StackPool
from harness.stack_spec import DEFAULT


@pytest.fixture(scope="module")
def stack(stack_pool: StackPool) -> Iterator[LocalStack]:
    """The shared security stack (import this fixture into a test module)."""
    with stack_pool.lease(DEFAULT) as local:
        yield local


@pytest.fixture(scope="module")
def admin(stack: LocalStack) -> Iterator[SchedulerClient]:
    """A SchedulerClient with the stack's admin key."""
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as client:
        yield client
