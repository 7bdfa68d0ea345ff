"""What a training run does for forward_backward, forward, optim_step and the checkpoint calls.

Each function runs inside the run's seq_id turn (the caller takes it) and returns the Tinker
response: proto bytes for forward_backward/forward, a JSON dict for the others.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Sequence

import numpy as np

from opentinker_gateway import datums, fields, losses
from opentinker_gateway.errors import BadRequest, Conflict, NotFound
from opentinker_gateway.records import CheckpointRecord, Records
from opentinker_gateway.runs import TrainingRun
from opentinker_gateway.wire import tinker_public_pb2 as wire

CHECKPOINT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MIN_TTL_SECONDS, MAX_TTL_SECONDS = 3600, 10 * 365 * 24 * 3600
ADAM_FIELDS = {"learning_rate": "learning_rate", "beta1": "beta1", "beta2": "beta2", "eps": "epsilon",
               "weight_decay": "weight_decay", "grad_clip_norm": "max_grad_norm"}


def loss_of(request: wire.ForwardBackwardRequest) -> tuple[losses.TinkerLoss, dict]:
    """The loss and the Trainer's LossConfig; a 400 naming an unknown loss or config key."""
    loss = losses.tinker_loss(request.loss_fn)
    config: dict[str, float | str] = {k: v for k, v in request.loss_fn_config.items()}
    for key, value in request.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    return loss, losses.loss_config(loss, config)


def prepare(request: wire.ForwardBackwardRequest) -> list[datums.PreparedDatum]:
    """The request's datums in the Trainer's form; a 400 for an unknown loss or a bad datum."""
    return datums.prepare(request.data, loss_of(request)[0])


async def forward_backward(run: TrainingRun, request: wire.ForwardBackwardRequest,
                           prepared: Sequence[datums.PreparedDatum], request_id: str) -> bytes:
    loss, config = loss_of(request)
    if request.forward_only:
        return await _forward(run, loss, config, prepared)
    response = await run.backend.forward_backward(run.trainer_session, [p.datum for p in prepared], config,
                                                  request_id)
    logprobs = [datums.target_logprobs(item.logprobs) for item in response.logprobs]
    return _output(loss, config, prepared, logprobs, response.metrics)


async def _forward(run: TrainingRun, loss: losses.TinkerLoss, config: dict,
                   prepared: Sequence[datums.PreparedDatum]) -> bytes:
    sequences = [list(p.datum.tokens) for p in prepared]
    logprobs = [datums.target_logprobs(lp) for lp in await run.backend.logprobs(run.trainer_session, sequences)]
    return _output(loss, config, prepared, logprobs, {})


def _output(loss: losses.TinkerLoss, config: dict, prepared: Sequence[datums.PreparedDatum],
            logprobs: Sequence[np.ndarray], trainer_metrics: dict) -> bytes:
    outputs = []
    for item, lp in zip(prepared, logprobs, strict=True):
        outputs.append({"logprobs": lp, "elementwise_loss": datums.elementwise_loss(loss, config, lp, item.inputs)})
    metrics = {"loss:sum": float(sum(o["elementwise_loss"].astype(np.float64).sum() for o in outputs))}
    for name, value in trainer_metrics.items():
        if math.isfinite(value):
            metrics[f"{name.replace(':', '_')}:mean"] = value
    return datums.forward_backward_output(outputs, metrics)


def adam_params(body: dict) -> dict:
    params = body.get("adam_params")
    if params is None:
        kind = (body.get("optimizer_params") or {}).get("type", "unknown")
        raise BadRequest(f"optim_step: optimizer {kind!r} is not supported; send AdamParams")
    unknown = sorted(set(params) - set(ADAM_FIELDS) - {"type"})
    if unknown:
        raise BadRequest(f"optim_step.adam_params: unknown field(s) {', '.join(unknown)}")
    if not isinstance(params, dict):
        raise BadRequest("optim_step.adam_params must be an object")
    return {ADAM_FIELDS[k]: fields.number(params, k) for k in params if k in ADAM_FIELDS}


async def optim_step(run: TrainingRun, adam: dict, request_id: str) -> dict:
    response = await run.backend.optim_step(run.trainer_session, adam, request_id)
    run.step, run.policy_version = int(response.step), int(response.policy_version)
    metrics = {"grad_norm:mean": response.grad_norm, "learning_rate:mean": response.learning_rate}
    metrics |= {f"{k}:mean": v for k, v in response.metrics.items() if math.isfinite(v)}
    return {"type": "optim_step", "metrics": metrics}


def checkpoint_name(name: str | None, fallback: str) -> str:
    name = name or fallback
    if not isinstance(name, str) or not CHECKPOINT_NAME.match(name):
        raise BadRequest(f"path {name!r} must be 1-128 letters, digits, '.', '_' or '-', starting with a "
                         f"letter or digit (it becomes tinker://<model>/weights/<path>)")
    return name


def expiry(ttl_seconds: int | None) -> float | None:
    if ttl_seconds is None:
        return None
    if not isinstance(ttl_seconds, int) or isinstance(ttl_seconds, bool) or \
            not MIN_TTL_SECONDS <= ttl_seconds <= MAX_TTL_SECONDS:
        raise BadRequest(f"ttl_seconds must be between {MIN_TTL_SECONDS} (1 hour) and {MAX_TTL_SECONDS} "
                         f"(10 years), or null (never expires); got {ttl_seconds}")
    return time.time() + ttl_seconds


async def save_checkpoint(run: TrainingRun, records: Records, *, kind: str, name: str, overwrite: bool,
                          ttl_seconds: int | None, user_metadata: dict | None, request_id: str) -> CheckpointRecord:
    segment = "weights" if kind == "training" else "sampler_weights"
    path = f"tinker://{run.model_id}/{segment}/{name}"
    expires_at = expiry(ttl_seconds)
    if not overwrite and await records.checkpoint(run.tenant_id, path) is not None:
        raise Conflict(f"{path} exists; save under another name or pass overwrite=True")
    saved = await run.backend.save_checkpoint(run.trainer_session, f"tinker-{kind}-{name}-{uuid.uuid4().hex[:8]}",
                                              request_id)
    record = CheckpointRecord(tinker_path=path, model_id=run.model_id, kind=kind, checkpoint_id=saved.checkpoint_id,
                              base_model=run.base_model.name, lora=run.lora, step=int(saved.step),
                              size_bytes=int(saved.size_bytes), expires_at=expires_at,
                              user_metadata={str(k): str(v) for k, v in (user_metadata or {}).items()})
    await records.save_checkpoint(run.tenant_id, record)
    return record


async def resolve_checkpoint(records: Records, tenant_id: str, path: str) -> CheckpointRecord:
    if not path.startswith("tinker://") or len(path[9:].split("/")) != 3:
        raise BadRequest(f"path {path!r} is not a tinker path (tinker://<model id>/weights/<name>)")
    record = await records.checkpoint(tenant_id, path)
    if record is None:
        raise NotFound(f"no checkpoint {path} (unknown, expired, or not yours)")
    return record
