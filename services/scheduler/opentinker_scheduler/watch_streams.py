"""How many WatchJob streams each tenant holds open on this scheduler, under a cap.

A stream costs no Redis connection of its own (the EventHub reads for all of them), but each
holds a gRPC stream, a queue and a task; the cap keeps one tenant from crowding out the others.
Admin keys (OpenTinker's services, and the dashboard for browsers without a key of their own)
share one larger cap. Counted per scheduler process: replicas each admit up to the cap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from opentinker_scheduler.errors import QuotaExceeded
from opentinker_scheduler.model import Caller

TENANT_CAP_SETTING = "OPENTINKER_SCHEDULER_MAX_WATCH_STREAMS_PER_TENANT"
ADMIN_CAP_SETTING = "OPENTINKER_SCHEDULER_MAX_ADMIN_WATCH_STREAMS"
ADMIN_BUCKET = ("admin", "")


@dataclass(kw_only=True)
class LiveStreams:
    tenant_cap: int
    admin_cap: int
    open: Counter[tuple[str, str]] = field(default_factory=Counter)

    @contextmanager
    def admitted(self, caller: Caller) -> Iterator[None]:
        """Count one live stream for the caller while the block runs; QuotaExceeded at the cap."""
        bucket = ADMIN_BUCKET if caller.admin else ("tenant", caller.tenant_id)
        cap = self.admin_cap if caller.admin else self.tenant_cap
        if self.open[bucket] >= cap:
            raise self._refusal(caller, cap)
        self.open[bucket] += 1
        try:
            yield
        finally:
            self.open[bucket] -= 1
            if not self.open[bucket]:
                del self.open[bucket]

    @staticmethod
    def _refusal(caller: Caller, cap: int) -> QuotaExceeded:
        if caller.admin:
            return QuotaExceeded(f"admin keys already hold {cap} live WatchJob streams on this scheduler, "
                                 f"their cap ({ADMIN_CAP_SETTING}={cap}); end some watches first",
                                 reason="STREAM_LIMIT")
        return QuotaExceeded(f"tenant {caller.tenant_id} already has {cap} live WatchJob streams on this "
                             f"scheduler, its cap ({TENANT_CAP_SETTING}={cap}); end some watches first",
                             reason="STREAM_LIMIT")
