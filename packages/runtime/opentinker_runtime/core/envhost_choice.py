"""Which registered EnvHost a job's `EnvironmentReference.envhost` names: one rule, used by the
Scheduler (SubmitJob refuses a name that resolves to nothing) and the Coordinator (it dials what
the name resolves to when the job runs).

A reference matches an EnvHost's worker id or name. Only the job's own tenant's EnvHosts and the
stack's own (registered with an admin key: no tenant) are candidates; the tenant's own come first,
then an alive one before a dead one, then the lowest worker id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SHARED_OWNER = ""
"""The owner of the stack's own EnvHosts (registered with an admin key), shared with every tenant."""


@dataclass(frozen=True, kw_only=True)
class EnvHostEntry:
    worker_id: str
    name: str
    tenant_id: str
    address: str
    alive: bool


def pick_envhost(entries: Iterable[EnvHostEntry], reference: str, tenant_id: str) -> EnvHostEntry | None:
    """The EnvHost `reference` names for a job of `tenant_id`; None when none is registered."""
    candidates = [e for e in entries if reference in (e.worker_id, e.name) and e.tenant_id in (tenant_id, SHARED_OWNER)]
    candidates.sort(key=lambda e: (e.tenant_id != tenant_id, not e.alive, e.worker_id))
    return candidates[0] if candidates else None
