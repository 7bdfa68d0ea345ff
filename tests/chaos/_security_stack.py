"""One local stack (`opentinker up`, auth on) for the security tests: job tokens, tenant isolation
and the secrets grep. Whichever of their modules runs first starts it; it stops when the test
session ends. Each module still creates its own tenants and jobs, so any of them runs alone.
Stacks cost ~30 s each to start and stop on a 2-core machine: one for three modules keeps
their CI time small."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from opentinker.client import SchedulerClient
from tests._stack import LocalStack

_STARTED: dict[str, LocalStack] = {}


def security_stack(tmp_path_factory: pytest.TempPathFactory, config: pytest.Config) -> LocalStack:
    if "stack" not in _STARTED:
        local = LocalStack(Path(tmp_path_factory.mktemp("security-stack")))
        local.up()
        config.add_cleanup(local.down)
        _STARTED["stack"] = local
    return _STARTED["stack"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> LocalStack:
    """The shared security stack (import this fixture into a test module)."""
    return security_stack(tmp_path_factory, pytestconfig)


@pytest.fixture(scope="module")
def admin(stack: LocalStack) -> Iterator[SchedulerClient]:
    """A SchedulerClient with the stack's admin key."""
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as client:
        yield client
