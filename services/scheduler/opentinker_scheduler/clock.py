"""Time for the domain: integer milliseconds since the Unix epoch, injectable in tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """Wall-clock time. Scheduler replicas sharing a Redis need synchronised clocks (NTP):
    lease and worker expiry compare times written by different processes."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
