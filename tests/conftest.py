"""Shared fixtures: one private redis-server per test session and a clean database per test; the
session's pool of local stacks (harness/stack_pool.py), which shares one stack between every test
that asks for an equal `StackSpec`."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
import redis
import structlog

from opentinker_runtime.core.embedded_redis import EmbeddedRedis
from harness.stack_pool import StackPool

SKIP_WITHOUT_GPU = "needs a CUDA GPU"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    """A private redis-server on a free port, shared by the whole test session."""
    with EmbeddedRedis(port=0, appendonly=False) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> Iterator[str]:
    """The session Redis's URL, with an empty database for this test (FLUSHDB before and after)."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    yield redis_server.url
    client.flushdb()
    client.close()


@pytest.fixture(scope="session")
def stack_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackPool]:
    """Local stacks by spec for the whole session: `stack_pool.lease(spec)` in a fixture shares
    the stack of `spec` with every other test that leases an equal spec; `stack_pool.private(spec)`
    is a stack of the caller's own. Every stack still running stops when the session ends."""
    pool = StackPool(lambda name: tmp_path_factory.mktemp(name).resolve())
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(autouse=True)
def _structlog_config_is_restored() -> Iterator[None]:
    """Tests that run the CLI in process (`main(argv)`) reconfigure structlog as the CLI does
    (warnings only); later tests that read service logs must see the configuration they had."""
    config = structlog.get_config()
    yield
    structlog.configure(**config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `@pytest.mark.gpu` tests unless torch sees a CUDA device."""
    if not any(item.get_closest_marker("gpu") for item in items) or _cuda_available():
        return
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.skip(reason=SKIP_WITHOUT_GPU))


def _cuda_available() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    import torch

    return torch.cuda.is_available()
