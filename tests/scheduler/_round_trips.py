"""Counting a redis-py client's round trips (one per command sent alone, one per pipeline)."""

from __future__ import annotations

from typing import Any

import redis.asyncio


class RoundTrips:
    """Counts the round trips a redis-py client makes: one per command sent alone, one per
    pipeline executed (whatever it carries)."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.count = 0
        execute_command, make_pipeline = client.execute_command, client.pipeline

        async def counted_command(*args: Any, **options: Any) -> Any:
            self.count += 1
            return await execute_command(*args, **options)

        def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = make_pipeline(*args, **kwargs)
            execute = pipe.execute

            async def counted_execute(*a: Any, **k: Any) -> Any:
                self.count += bool(pipe.command_stack)
                return await execute(*a, **k)

            pipe.execute = counted_execute
            return pipe

        client.execute_command, client.pipeline = counted_command, counted_pipeline
