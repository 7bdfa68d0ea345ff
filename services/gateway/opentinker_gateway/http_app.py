"""The Tinker REST API over HTTP (aiohttp): parse the wire, call `GatewayService`, write the answer.

Work that takes time answers `{"request_id": ...}` at once; `retrieve_future` long-polls it (408
with `{"type": "try_again"}` while it runs). forward_backward takes a protobuf body (zstd when the
client says so); its result and a sample's are protobuf, everything else JSON. Errors are JSON
`{"error", "category", "detail"}` with an HTTP status the SDK maps to its exception classes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import structlog
import zstandard
from aiohttp import web
from google.protobuf.message import DecodeError

from opentinker_gateway import fields, hf_files
from opentinker_gateway.auth import TenantAuth
from opentinker_gateway.errors import BadRequest, GatewayError, NotFound
from opentinker_gateway.futures import Done, Failed
from opentinker_gateway.records import CheckpointRecord, RunRecord
from opentinker_gateway.service import Caller, GatewayService
from opentinker_gateway.wire import tinker_public_pb2 as wire

log = structlog.get_logger("opentinker.gateway.http")
MAX_BODY_BYTES = 64 * 1024 * 1024
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PROTO = "application/x-protobuf"
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False, "credential_default_source": "api_key", "parallel_fwdbwd_chunks": True,
    "proto_compress_fwdbwd": True, "sample_use_retrieve_futures": False, "custom_loss_server_side": False,
    "sample_join_sampling_session": False, "use_pyqwest_transport": True,
}
SERVICE = web.AppKey("service", GatewayService)
AUTH = web.AppKey("auth", TenantAuth)
LONG_POLL = web.AppKey("long_poll_seconds", float)


def build_app(service: GatewayService, auth: TenantAuth, *, long_poll_seconds: float) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[errors_as_json])
    app[SERVICE], app[AUTH], app[LONG_POLL] = service, auth, long_poll_seconds
    app.router.add_get("/api/v1/healthz", healthz)
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/api/v1/telemetry", telemetry)
    for path, handler in POSTS.items():
        app.router.add_post(f"/api/v1/{path}", handler)
    for path, handler in GETS.items():
        app.router.add_get(f"/api/v1/{path}", handler)
    app.router.add_delete("/api/v1/training_runs/{run_id}/checkpoints/{checkpoint:.+}", delete_checkpoint)
    for path in UNSUPPORTED:
        app.router.add_post(f"/api/v1/{path}", unsupported)
    hf_files.add_routes(app, service.tokenizer_dirs)
    return app


@web.middleware
async def errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except GatewayError as error:
        if error.status >= 500:
            log.warning("request_failed", path=request.path, status=error.status, error=error.message)
        return web.json_response({"error": error.message, "detail": error.message, "category": error.category},
                                 status=error.status)


async def _caller(request: web.Request) -> Caller:
    return await request.app[AUTH].caller(request.headers.get("X-API-Key"))


async def _json(request: web.Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        raise BadRequest("the body is not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _future(request_id: str, **extra: Any) -> web.Response:
    return web.json_response({"request_id": request_id, **extra})


# ---------------------------------------------------------------- session and config


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def unsupported(request: web.Request) -> web.Response:
    """A Tinker call this gateway does not serve: a 400 that says so (not a bare 404)."""
    caller = await _caller(request)
    try:
        body = await request.json()
    except ValueError:
        body = None
    if isinstance(body, dict):  # a model's call used a seq_id on the client: the calls after it must run
        await request.app[SERVICE].skip_turn(caller, body.get("model_id"), body.get("seq_id"))
    name = request.path.removeprefix("/api/v1/")
    raise BadRequest(f"{name} is not supported by this OpenTinker gateway (docs/tinker.md lists what is)")


async def telemetry(request: web.Request) -> web.Response:
    """The SDK's telemetry events: accepted and dropped (nothing leaves this stack)."""
    return web.json_response({"status": "accepted"})


async def client_config(request: web.Request) -> web.Response:
    return web.json_response(CLIENT_CONFIG)


async def dynamic_config(request: web.Request) -> web.Response:
    return web.json_response({"refresh_interval_sec": 300, "sample_cancel_enabled": False})


async def create_session(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    session = request.app[SERVICE].create_session(caller, body)
    return web.json_response({"type": "create_session", "session_id": session.session_id})


async def session_heartbeat(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    try:
        request.app[SERVICE].heartbeat(caller, str(body.get("session_id", "")))
    except NotFound as error:
        raise web.HTTPGone(text=error.message) from None
    return web.json_response({"type": "session_heartbeat"})


async def finish_session(request: web.Request) -> web.Response:
    caller = await _caller(request)
    await request.app[SERVICE].finish_session(caller, request.match_info["session_id"])
    return web.json_response({})


async def server_capabilities(request: web.Request) -> web.Response:
    await _caller(request)
    models = [{"model_name": name, "trainable": True, "sampleable": True} for name in sorted(request.app[SERVICE].catalog)]
    return web.json_response({"supported_models": models})


# ---------------------------------------------------------------- models and training


async def create_model(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    service = request.app[SERVICE]
    model = service.base_model(fields.text(body, "base_model"))
    lora = service.lora_settings(fields.mapping(body, "lora_config"))
    service.check_optimizer(fields.mapping(body, "optimizer_config"))
    session_id, seq = fields.text(body, "session_id"), fields.integer(body, "model_seq_id", 0)
    service.sessions.get(caller.tenant_id, session_id)

    async def work() -> dict:
        run = await service.create_run(caller, session_id, seq, model, lora, body.get("user_metadata"))
        return {"type": "create_model", "model_id": run.model_id}

    model_id = f"{session_id}:train:{seq}"
    return _future(service.futures.submit(caller.tenant_id, "CreateModel", work(), dedupe_key=f"{model_id}/create"),
                   model_id=model_id)


async def get_info(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    return web.json_response(request.app[SERVICE].info(caller, str(body.get("model_id", ""))))


async def forward_backward(request: web.Request) -> web.Response:
    caller = await _caller(request)
    message = wire.ForwardBackwardRequest()
    try:
        message.ParseFromString(_decompressed(await request.read(), request.headers.get("Content-Encoding", "")))
    except DecodeError:
        raise BadRequest("the body is not a ForwardBackwardRequest protobuf") from None
    return _future(await request.app[SERVICE].forward_backward(caller, message), model_id=message.model_id)


def _decompressed(body: bytes, encoding: str) -> bytes:
    if "zstd" not in encoding.lower() or not body.startswith(ZSTD_MAGIC):
        return body  # plain, or already decompressed on the way in
    try:
        return zstandard.ZstdDecompressor().decompress(body, max_output_size=MAX_BODY_BYTES)
    except zstandard.ZstdError as error:
        raise BadRequest(f"the zstd body does not decompress: {error}") from None


async def optim_step(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    return _future(await request.app[SERVICE].optim_step(caller, body), model_id=body.get("model_id"))


async def save_weights(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    return _future(await request.app[SERVICE].save_weights(caller, body), model_id=body.get("model_id"))


async def load_weights(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    return _future(await request.app[SERVICE].load_weights(caller, body), model_id=body.get("model_id"))


async def save_for_sampler(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    return _future(await request.app[SERVICE].save_for_sampler(caller, body), model_id=body.get("model_id"))


# ---------------------------------------------------------------- sampling


async def create_sampling_session(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    sampler_id = await request.app[SERVICE].create_sampling_session(caller, body)
    return web.json_response({"type": "create_sampling_session", "sampling_session_id": sampler_id})


async def asample(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    request_id, sequence_ids = request.app[SERVICE].sample(caller, body)
    return _future(request_id, sample_sequence_ids=sequence_ids)


async def get_sampler(request: web.Request) -> web.Response:
    caller = await _caller(request)
    return web.json_response(request.app[SERVICE].sampler_info(caller, request.match_info["sampler_id"]))


# ---------------------------------------------------------------- futures


async def retrieve_future(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    outcome = await request.app[SERVICE].futures.retrieve(caller.tenant_id, str(body.get("request_id", "")),
                                                         wait_seconds=request.app[LONG_POLL])
    if isinstance(outcome, Done):
        if isinstance(outcome.value, bytes):
            return web.Response(body=outcome.value, content_type=PROTO)
        return web.json_response(outcome.value)
    if isinstance(outcome, Failed):
        return web.json_response({"error": outcome.error.message, "category": outcome.error.category})
    return web.json_response({"type": "try_again", "request_id": body.get("request_id"), "queue_state": "active"},
                             status=408)


# ---------------------------------------------------------------- runs and checkpoints


async def list_training_runs(request: web.Request) -> web.Response:
    caller = await _caller(request)
    limit, offset = _paging(request, default_limit=20)
    runs = await request.app[SERVICE].records.runs(caller.tenant_id)
    page = runs[offset:offset + limit]
    items = [await _training_run(request.app[SERVICE], caller, run) for run in page]
    return web.json_response({"training_runs": items,
                              "cursor": {"offset": offset, "limit": limit, "total_count": len(runs)}})


async def get_training_run(request: web.Request) -> web.Response:
    caller = await _caller(request)
    service = request.app[SERVICE]
    run = await service.records.run(caller.tenant_id, request.match_info["run_id"])
    if run is None:
        raise NotFound(f"no training run {request.match_info['run_id']!r} (unknown, or not yours)")
    return web.json_response(await _training_run(service, caller, run))


async def list_run_checkpoints(request: web.Request) -> web.Response:
    caller = await _caller(request)
    service, run_id = request.app[SERVICE], request.match_info["run_id"]
    if await service.records.run(caller.tenant_id, run_id) is None:
        raise NotFound(f"no training run {run_id!r} (unknown, or not yours)")
    records = await service.records.checkpoints(caller.tenant_id, run_id)
    return web.json_response({"checkpoints": [_checkpoint(r) for r in records]})


async def list_user_checkpoints(request: web.Request) -> web.Response:
    caller = await _caller(request)
    limit, offset = _paging(request, default_limit=100)
    records = await request.app[SERVICE].records.checkpoints(caller.tenant_id)
    return web.json_response({"checkpoints": [_checkpoint(r) for r in records[offset:offset + limit]],
                              "cursor": {"offset": offset, "limit": limit, "total_count": len(records)}})


async def delete_checkpoint(request: web.Request) -> web.Response:
    caller = await _caller(request)
    path = f"tinker://{request.match_info['run_id']}/{request.match_info['checkpoint']}"
    if not await request.app[SERVICE].records.delete_checkpoint(caller.tenant_id, path):
        raise NotFound(f"no checkpoint {path} (unknown, or not yours)")
    return web.Response(status=204)


async def weights_info(request: web.Request) -> web.Response:
    caller, body = await _caller(request), await _json(request)
    from opentinker_gateway.training import resolve_checkpoint

    record = await resolve_checkpoint(request.app[SERVICE].records, caller.tenant_id, str(body.get("tinker_path", "")))
    return web.json_response({"base_model": record.base_model, "is_lora": True, "lora_rank": record.lora.rank,
                              "train_unembed": record.lora.train_unembed, "train_mlp": record.lora.train_mlp,
                              "train_attn": record.lora.train_attn})


def _paging(request: web.Request, *, default_limit: int) -> tuple[int, int]:
    try:
        limit = int(request.query.get("limit", default_limit))
        offset = int(request.query.get("offset", 0))
    except ValueError:
        raise BadRequest("limit and offset must be integers") from None
    if not 1 <= limit <= 1000 or offset < 0:
        raise BadRequest("limit must be 1..1000 and offset >= 0")
    return limit, offset


async def _training_run(service: GatewayService, caller: Caller, run: RunRecord) -> dict:
    checkpoints = await service.records.checkpoints(caller.tenant_id, run.model_id)
    last = {kind: next((c for c in reversed(checkpoints) if c.kind == kind), None) for kind in ("training", "sampler")}
    live = service.runs.find(run.model_id)
    return {"training_run_id": run.model_id, "base_model": run.base_model, "model_owner": caller.tenant_id,
            "is_lora": True, "corrupted": False, "lora_rank": run.lora.rank,
            "last_request_time": _time(live.last_request if live else run.created),
            "last_checkpoint": _checkpoint(last["training"]) if last["training"] else None,
            "last_sampler_checkpoint": _checkpoint(last["sampler"]) if last["sampler"] else None,
            "user_metadata": run.user_metadata or None}


def _checkpoint(record: CheckpointRecord) -> dict:
    return {"checkpoint_id": record.tinker_path.split("/", 3)[3], "checkpoint_type": record.kind,
            "time": _time(record.created), "tinker_path": record.tinker_path, "size_bytes": record.size_bytes,
            "public": False, "user_metadata": record.user_metadata or None,
            "expires_at": _time(record.expires_at) if record.expires_at else None}


def _time(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc).isoformat()


UNSUPPORTED = ("copy_weights", "save_weights_external", "create_custom_loss", "cancel_future", "retrieve_futures",
               "join_sampling_session", "unload_model")
"""Tinker calls the gateway refuses with a clear 400 (its client config never asks the SDK to use
the optional ones: custom losses run on the client, each future is polled on its own)."""
POSTS = {
    "client/config": client_config, "client/dynamic_config": dynamic_config, "create_session": create_session,
    "session_heartbeat": session_heartbeat, "create_model": create_model, "get_info": get_info,
    "forward_backward": forward_backward, "optim_step": optim_step, "save_weights": save_weights,
    "load_weights": load_weights, "save_weights_for_sampler": save_for_sampler,
    "create_sampling_session": create_sampling_session, "asample": asample, "retrieve_future": retrieve_future,
    "weights_info": weights_info, "sessions/{session_id}/finish": finish_session,
}
GETS = {
    "get_server_capabilities": server_capabilities, "samplers/{sampler_id}": get_sampler,
    "training_runs": list_training_runs, "training_runs/{run_id}": get_training_run,
    "training_runs/{run_id}/checkpoints": list_run_checkpoints, "checkpoints": list_user_checkpoints,
}
