"""What outlives a gateway process: each tenant's training runs and checkpoints, in Redis.

`ot:gateway:runs:<tenant>` maps a model id to its run record, `ot:gateway:checkpoints:<tenant>`
maps a tinker path to its checkpoint record (JSON both). A tenant only ever reads its own hashes,
so another tenant's run or checkpoint reads as missing.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

RUNS_KEY = "ot:gateway:runs:{tenant}"
CHECKPOINTS_KEY = "ot:gateway:checkpoints:{tenant}"


@dataclass(frozen=True, kw_only=True)
class LoraSettings:
    rank: int
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    model_id: str
    base_model: str
    lora: LoraSettings
    job_id: str
    created: float = field(default_factory=time.time)
    user_metadata: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> RunRecord:
        data = json.loads(text)
        return cls(**{**data, "lora": LoraSettings(**data["lora"])})


@dataclass(frozen=True, kw_only=True)
class CheckpointRecord:
    tinker_path: str
    model_id: str
    kind: str
    """"training" (save_state: weights + optimizer) or "sampler" (save_weights_for_sampler)."""
    checkpoint_id: str
    """The Trainer's checkpoint id (a training state with the adapter and the optimizer)."""
    base_model: str
    lora: LoraSettings
    step: int
    size_bytes: int
    created: float = field(default_factory=time.time)
    expires_at: float | None = None
    user_metadata: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> CheckpointRecord:
        data = json.loads(text)
        return cls(**{**data, "lora": LoraSettings(**data["lora"])})


class Records:
    def __init__(self, redis: Any) -> None:
        self.redis = redis

    async def save_run(self, tenant_id: str, run: RunRecord) -> None:
        await self.redis.hset(RUNS_KEY.format(tenant=tenant_id), run.model_id, run.to_json())

    async def run(self, tenant_id: str, model_id: str) -> RunRecord | None:
        raw = await self.redis.hget(RUNS_KEY.format(tenant=tenant_id), model_id)
        return RunRecord.from_json(raw) if raw else None

    async def runs(self, tenant_id: str) -> list[RunRecord]:
        raw = await self.redis.hvals(RUNS_KEY.format(tenant=tenant_id))
        return sorted((RunRecord.from_json(r) for r in raw), key=lambda r: (r.created, r.model_id))

    async def save_checkpoint(self, tenant_id: str, record: CheckpointRecord) -> None:
        await self.redis.hset(CHECKPOINTS_KEY.format(tenant=tenant_id), record.tinker_path, record.to_json())

    async def checkpoint(self, tenant_id: str, tinker_path: str) -> CheckpointRecord | None:
        raw = await self.redis.hget(CHECKPOINTS_KEY.format(tenant=tenant_id), tinker_path)
        if not raw:
            return None
        record = CheckpointRecord.from_json(raw)
        if record.expires_at is not None and record.expires_at < time.time():
            return None
        return record

    async def checkpoints(self, tenant_id: str, model_id: str | None = None) -> list[CheckpointRecord]:
        raw = await self.redis.hvals(CHECKPOINTS_KEY.format(tenant=tenant_id))
        now = time.time()
        records = [CheckpointRecord.from_json(r) for r in raw]
        return sorted((r for r in records if (model_id is None or r.model_id == model_id)
                       and (r.expires_at is None or r.expires_at >= now)), key=lambda r: (r.created, r.tinker_path))

    async def delete_checkpoint(self, tenant_id: str, tinker_path: str) -> bool:
        return bool(await self.redis.hdel(CHECKPOINTS_KEY.format(tenant=tenant_id), tinker_path))
