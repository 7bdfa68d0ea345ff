"""The one thread that runs torch work (generation, weight loads) for every policy.

torch's CPU kernels keep a thread pool per calling thread; hopping between the threads of
`asyncio.to_thread`'s pool leaves idle pools spinning against the busy one (measured: one
request at a time drops from ~420 to ~100 tokens/s on 2 cores). One dedicated thread keeps
one pool, and serialises engine calls, which compete for the same cores anyway.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-engine")


async def run_in_engine_thread(function: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run a blocking torch call on the engine thread without blocking the event loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_EXECUTOR, functools.partial(function, *args, **kwargs))
