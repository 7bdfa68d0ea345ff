"""Retries with exponential backoff and jitter, for idempotent calls only.

A call is retried when the server could not be reached (UNAVAILABLE) and the call is safe to
repeat: reads, and writes the server deduplicates (SubmitJob with its request_id, CancelJob,
setting a quota, revoking a key). Calls that would do their work twice (minting an API key,
creating a tenant, a Trainer's forward_backward) are never retried: their failure reaches the
caller at once.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from opentinker.client.errors import from_rpc_error

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    attempts: int = 6
    """Tries in all, the first included (1 = never retry)."""
    initial_delay: float = 0.2
    max_delay: float = 4.0
    multiplier: float = 2.0
    jitter: float = 0.2
    """Each delay is scaled by a random factor in [1 - jitter, 1 + jitter]."""
    codes: tuple[grpc.StatusCode, ...] = (grpc.StatusCode.UNAVAILABLE,)

    def delay(self, retry: int) -> float:
        """Seconds to sleep before retry number `retry` (0-based)."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** retry)
        return base * random.uniform(1 - self.jitter, 1 + self.jitter)

    def should_retry(self, error: grpc.RpcError, retry: int) -> bool:
        return error.code() in self.codes and retry + 1 < self.attempts


NO_RETRY = RetryPolicy(attempts=1)


def call_with_retry(call: Callable[[], T], policy: RetryPolicy, *, idempotent: bool) -> T:
    """`call()`, retried per `policy` when idempotent; grpc errors become OpenTinkerError."""
    policy = policy if idempotent else NO_RETRY
    retry = 0
    while True:
        try:
            return call()
        except grpc.RpcError as error:
            if not policy.should_retry(error, retry):
                raise from_rpc_error(error) from None
            time.sleep(policy.delay(retry))
            retry += 1


async def acall_with_retry(call: Callable[[], Awaitable[T]], policy: RetryPolicy, *, idempotent: bool) -> T:
    """The asyncio form of call_with_retry."""
    policy = policy if idempotent else NO_RETRY
    retry = 0
    while True:
        try:
            return await call()
        except grpc.RpcError as error:
            if not policy.should_retry(error, retry):
                raise from_rpc_error(error) from None
            await asyncio.sleep(policy.delay(retry))
            retry += 1
