"""Fixtures shared by the EnvHost's tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop per module (its managers' fork servers live on it)."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()
