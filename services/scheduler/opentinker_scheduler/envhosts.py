"""EnvHosts a job may play on: the stack's own, and the ones a tenant serves itself.

A tenant key may register EnvHosts (ROLE_ENVHOST, no devices: `opentinker envhost --name NAME`);
they belong to that tenant. A job names its EnvHost by worker id or name in
`EnvironmentReference.envhost`, and only its own tenant's EnvHosts and the stack's (registered
with an admin key, shared with every tenant) resolve; another tenant's is "not registered", in the
same words as one that does not exist. A raw `envhost_address` stays an admin-only option: the
services call whatever it names. Calls to a resolved EnvHost carry only the job's token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from opentinker_runtime.core.envhost_choice import SHARED_OWNER, EnvHostEntry, pick_envhost
from opentinker_scheduler.errors import InvalidArgument, PermissionDenied, QuotaExceeded
from opentinker_scheduler.model import (
    Caller,
    EnvHostField,
    EnvironmentFacts,
    Role,
    Worker,
    WorkerRegistration,
    WorkerState,
)
from opentinker_scheduler.served_environments import EnvHostSnapshot, check_env_names
from opentinker_scheduler.workers import WorkerRegistry

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
SNAPSHOT_MAX_AGE_MS = 2_000
"""How old a snapshot of the EnvHosts may be to accept a spec's env names on (a refusal reads anew)."""
SHARED = SHARED_OWNER


def owner_of(caller: Caller) -> str:
    """Who a registration by `caller` belongs to."""
    return SHARED if caller.admin else caller.tenant_id


def check_name(registration: WorkerRegistration) -> None:
    if not registration.name:
        return
    if registration.role is not Role.ENVHOST:
        raise InvalidArgument("name", "only EnvHosts (ROLE_ENVHOST) have names jobs use")
    if not NAME_PATTERN.match(registration.name):
        raise InvalidArgument("name", "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")


def check_tenant_registration(registration: WorkerRegistration, caller: Caller) -> None:
    """A tenant key registers EnvHosts it serves itself, nothing else."""
    if caller.admin:
        return
    if registration.role is not Role.ENVHOST:
        raise PermissionDenied("role: a tenant key registers only EnvHosts (ROLE_ENVHOST), which then serve that "
                               "tenant's jobs; trainers, rollouts, coordinators and gateways need an admin key")
    if registration.devices:
        raise InvalidArgument("devices", "an EnvHost registered with a tenant key offers no devices")


def check_claim(existing: Worker | None, caller: Caller) -> None:
    """A worker id registered by someone else is not the caller's to take over (an admin's is)."""
    if existing is not None and not caller.admin and existing.tenant_id != owner_of(caller):
        raise PermissionDenied(f"worker_id: {existing.worker_id!r} is registered by someone else; choose another "
                               "worker id (opentinker envhost --name NAME --advertise HOST:PORT)")


def owns(worker: Worker | None, caller: Caller) -> bool:
    """May `caller` heartbeat, deregister or list `worker`?"""
    return worker is not None and (caller.admin or worker.tenant_id == caller.tenant_id)


@dataclass(frozen=True, kw_only=True)
class EnvHostDirectory:
    registry: WorkerRegistry
    max_per_tenant: int
    snapshot: EnvHostSnapshot = field(default_factory=EnvHostSnapshot)
    """The EnvHosts (and the games they serve) as last read here; told by allocator passes too."""

    async def check_room(self, registration: WorkerRegistration, caller: Caller) -> None:
        """A tenant's registered EnvHosts are bounded (QuotaExceeded names the cap)."""
        if caller.admin:
            return
        held = [w for w in await self.registry.all() if w.tenant_id == caller.tenant_id
                and w.state is not WorkerState.DEAD and w.worker_id != registration.worker_id]
        if len(held) >= self.max_per_tenant:
            raise QuotaExceeded(f"tenant {caller.tenant_id} already has {len(held)} EnvHosts registered (at most "
                                f"{self.max_per_tenant}); deregister one first")

    async def find(self, reference: str, tenant_id: str) -> Worker | None:
        """The EnvHost `reference` (worker id or name) names for `tenant_id` (the rule of
        opentinker_runtime.core.envhost_choice); None when there is none."""
        workers = {w.worker_id: w for w in await self.registry.all() if w.role is Role.ENVHOST}
        entries = (EnvHostEntry(worker_id=w.worker_id, name=w.name, tenant_id=w.tenant_id, address=w.address,
                                alive=w.state is not WorkerState.DEAD) for w in workers.values())
        chosen = pick_envhost(entries, reference, tenant_id)
        return workers[chosen.worker_id] if chosen else None

    async def check_env_names(self, references: Iterable[EnvironmentFacts], caller: Caller) -> None:
        """Each env name is served by the EnvHosts it may be played on, where that is known
        (served_environments.py): accepted on a recent snapshot of the EnvHosts without a read;
        refused only on a fresh read."""
        references = [reference for reference in references if reference.env_name]
        if not references:
            return
        recent = self.snapshot.fresh(self.registry.clock.now_ms(), SNAPSHOT_MAX_AGE_MS)
        if recent is not None:
            try:
                check_env_names(references, recent, caller)
                return
            except InvalidArgument:
                pass  # the snapshot may be behind a registration elsewhere: read before refusing
        read_ms = self.registry.clock.now_ms()
        self.snapshot.saw(await self.registry.all(), read_ms)
        check_env_names(references, self.snapshot.envhosts or [], caller)

    async def check_names(self, fields: Iterable[EnvHostField], caller: Caller) -> None:
        """Every EnvHost a spec names by id or name is the caller's own or the stack's."""
        for field in fields:
            if field.kind == "envhost" and field.value and await self.find(field.value, caller.tenant_id) is None:
                raise InvalidArgument(field.path, f"no EnvHost {field.value[:100]!r} is registered for your tenant "
                                      "(register it with `opentinker envhost --name NAME` under your key; "
                                      "`opentinker workers` lists yours)", reason="ENVHOST_NOT_FOUND")


def check_addresses(fields: Iterable[EnvHostField], caller: Caller) -> None:
    """A raw envhost_address anywhere in a spec is for admin keys only (checked before anything
    else about the spec: who may set a field comes first)."""
    for field in fields:
        if field.kind == "envhost_address" and field.value and not caller.admin:
            raise PermissionDenied(
                f"{field.path}: a raw address is for admin keys only; serve your games with `opentinker envhost "
                "--name NAME --scheduler HOST:PORT` under your tenant's key and name it in "
                f"{field.path.rsplit('.', 1)[0]}.envhost", reason="ADMIN_ONLY_FIELD")
