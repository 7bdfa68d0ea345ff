"""What a tenant key's job spec may name: paths inside its tenant area, checkpoints of its own jobs.

Admin keys keep every path (absolute ones included) and every checkpoint. A tenant key's paths must
be relative to its tenant area (`opentinker_runtime.auth.tenant_paths`: the Coordinator resolves them there,
symlinks followed), except local models in the admin's shared model directory; this is judged from
the text alone, so `validate_only` refuses the same specs and nothing is learnt about the server's
files. A checkpoint belongs to the tenant whose job reported it (CheckpointSaved); another tenant's
and an unknown id get the same NOT_FOUND.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio

from opentinker_runtime.core.redis_store import Keys
from opentinker_runtime.auth.tenant_paths import TenantAreas, relative_path_problem
from opentinker_scheduler.errors import InvalidArgument, NotFound
from opentinker_scheduler.events import CheckpointSaved, Payload
from opentinker_scheduler.model import Caller, PathField

PATH_NOT_ALLOWED = "PATH_NOT_ALLOWED"
HINTS = {"output": "e.g. results/eval.jsonl, written to outputs/ of your tenant area",
         "dataset": "e.g. chats.jsonl, read from datasets/ of your tenant area",
         "config": "e.g. problems.jsonl, read from datasets/ of your tenant area",
         "model": "e.g. my-model, read from models/ of your tenant area, or an absolute path in the "
                  "shared model directory"}


def check_tenant_paths(fields: Sequence[PathField], caller: Caller, shared_model_dir: Path | None) -> None:
    """INVALID_ARGUMENT (reason PATH_NOT_ALLOWED) for the first path a tenant key may not name."""
    if caller.admin:
        return
    shared = TenantAreas(root=Path("."), shared_model_dir=shared_model_dir)
    for field in fields:
        if field.kind == "model" and shared.in_shared_model_dir(field.value):
            continue
        if problem := relative_path_problem(field.value):
            raise InvalidArgument(field.path, f"{problem} ({HINTS[field.kind]})", reason=PATH_NOT_ALLOWED)


def checkpoint_not_found(field: str, checkpoint_id: str) -> NotFound:
    """The same answer for a checkpoint that does not exist and one of another tenant."""
    return NotFound(f"{field}: no checkpoint {checkpoint_id[:128]!r} among your tenant's; name a checkpoint "
                    "your own jobs saved (see their CheckpointSaved events)", reason="INVALID_FIELD")


@dataclass(frozen=True, kw_only=True)
class CheckpointOwners:
    """Which tenant each checkpoint belongs to: the hash `<prefix>checkpoint-owners` (id -> tenant)."""

    client: redis.asyncio.Redis
    keys: Keys

    @property
    def key(self) -> str:
        return f"{self.keys.prefix}checkpoint-owners"

    async def record(self, tenant_id: str, payloads: Iterable[Payload | None]) -> None:
        """Own every checkpoint a job of `tenant_id` reported; a checkpoint's first owner stays."""
        ids = {i for p in payloads if isinstance(p, CheckpointSaved)
               for i in (p.checkpoint_id, *p.agent_checkpoint_ids.values()) if i}
        if not ids:
            return
        async with self.client.pipeline(transaction=False) as pipe:
            for checkpoint_id in sorted(ids):
                pipe.hsetnx(self.key, checkpoint_id, tenant_id)
            await pipe.execute()

    async def check_spec(self, refs: Sequence[tuple[str, str]], caller: Caller) -> None:
        """NOT_FOUND for the first checkpoint a tenant key names that is not its tenant's."""
        if caller.admin or not refs:
            return
        owners = await self.client.hmget(self.key, [checkpoint_id for _, checkpoint_id in refs])
        for (field, checkpoint_id), owner in zip(refs, owners, strict=True):
            if owner is None or owner.decode() != caller.tenant_id:
                raise checkpoint_not_found(field, checkpoint_id)
