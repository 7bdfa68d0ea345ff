"""The scheduler's Redis replies are parsed by hiredis (C), not redis-py's Python parser."""

from __future__ import annotations

import redis.asyncio.connection
from redis.utils import HIREDIS_AVAILABLE


def test_redis_py_parses_with_hiredis() -> None:
    assert HIREDIS_AVAILABLE, "hiredis is pinned in requirements/stack.txt and the scheduler's package"
    assert "Hiredis" in redis.asyncio.connection.DefaultParser.__name__
