"""Bad input at the Tinker gateway's HTTP surface: every request here fails validation before any
work starts, so the app runs over a real GatewayService (real sessions, futures, records on the
test session's Redis) without a Scheduler, Trainer or Rollout. Keys are checked by a fake
`verify` (TenantAuth's seam); a live training run, where one is needed, has a JobBackend whose
workers do not exist and must never be called.

Each answer must be the status the SDK maps to its exception class, as JSON with "error" and
"category"; never a 500.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import numpy as np
import pytest
import zstandard
from aiohttp.test_utils import TestClient, TestServer
from tinker import types
from tinker.proto import request_conv

from opentinker_api.common.v1 import resources_pb2
from opentinker_runtime.auth.api_keys import Principal
from opentinker_runtime.core.channel_pool import ChannelPool
from opentinker_gateway.auth import TenantAuth
from opentinker_gateway.backend import JobBackend, Placement
from opentinker_gateway.catalog import parse_catalog
from opentinker_gateway.errors import BadRequest
from opentinker_gateway.futures import FutureStore
from opentinker_gateway.http_app import build_app
from opentinker_gateway.records import LoraSettings, Records
from opentinker_gateway.runs import TrainingRun
from opentinker_gateway.service import Caller, GatewayService
from opentinker_gateway.sessions import ClientSessions

ACME, GLOBEX = "tml-otk_acme_secret", "tml-otk_globex_secret"
PRINCIPALS = {"otk_acme_secret": Principal(tenant_id="acme"), "otk_globex_secret": Principal(tenant_id="globex")}
NOWHERE = "127.0.0.1:9"
"""The workers of the fake run's placement: nothing listens there (and nothing may call it)."""


async def verify(key: str) -> Principal | None:
    return PRINCIPALS.get(key)


@dataclass
class Gateway:
    client: TestClient
    service: GatewayService

    async def post(self, path: str, body: object = None, *, key: str | None = ACME, raw: bytes | None = None,
                   headers: dict | None = None) -> tuple[int, object]:
        data = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
        response = await self.client.post(f"/api/v1/{path}", data=data, headers={**_key(key), **(headers or {})})
        return response.status, await _body(response)

    async def get(self, path: str, *, key: str | None = ACME, params: dict | None = None) -> tuple[int, object]:
        response = await self.client.get(f"/api/v1/{path}", headers=_key(key), params=params)
        return response.status, await _body(response)

    async def session(self, key: str = ACME) -> str:
        status, body = await self.post("create_session", {"sdk_version": "0.38.0", "tags": []}, key=key)
        assert status == 200, body
        return body["session_id"]


def _key(key: str | None) -> dict:
    return {} if key is None else {"X-API-Key": key}


async def _body(response) -> object:
    text = await response.text()
    try:
        return json.loads(text)
    except ValueError:
        return text


@asynccontextmanager
async def gateway(redis_url: str) -> AsyncIterator[Gateway]:
    from opentinker_runtime.core.redis_store import connect

    redis, pool = connect(redis_url), ChannelPool()
    service = GatewayService(catalog=parse_catalog("demo=builtin:tiny-llama"), tokenizer_dirs={},
                             records=Records(redis), jobs=None, pool=pool, futures=FutureStore(ttl_seconds=60),
                             sessions=ClientSessions(timeout_seconds=120), call_timeout=2.0)
    app = build_app(service, TenantAuth(verify), long_poll_seconds=0.05)
    server = TestServer(app)
    await server.start_server(auto_decompress=False)  # as main.serve runs it: http_app reads zstd itself
    try:
        async with TestClient(server) as client:
            yield Gateway(client=client, service=service)
    finally:
        await pool.close()
        await redis.aclose()


def run_with_gateway(redis_url: str, scenario: Callable[[Gateway], Awaitable[object]]) -> object:
    async def body():
        async with gateway(redis_url) as gw:
            return await asyncio.wait_for(scenario(gw), 20)

    return asyncio.run(body())


def live_run(gw: Gateway, session_id: str, tenant_id: str = "acme") -> TrainingRun:
    """A training run of `session_id` as create_model leaves it, on workers that do not exist."""
    lease = resources_pb2.LeaseContext(job_id="job-1", lease_id="lease-1", fencing_token=1)
    placement = Placement(job_id="job-1", job_token="token", trainer_address=NOWHERE, trainer_lease=lease,
                          trainer_devices=("cpu:0",), rollout_address=NOWHERE, rollout_lease=lease)
    run = TrainingRun(model_id=f"{session_id}:train:0", tenant_id=tenant_id, tenant_key="otk_acme_secret",
                      client_session=session_id, base_model=gw.service.catalog["demo"], lora=LoraSettings(rank=8),
                      backend=JobBackend(gw.service.pool, placement, timeout=1.0), trainer_session="trainer-session-1")
    gw.service.runs.add(run)
    return run


def assert_error(answer: tuple[int, object], status: int, *fragments: str) -> None:
    code, body = answer
    assert code == status, body
    assert isinstance(body, dict) and set(body) >= {"error", "category"}, body
    assert body["category"] == "user"
    for fragment in fragments:
        assert fragment in body["error"], body


def fb_bytes(model_id: str, seq_id: int, *, weights: list[float] | None = None, loss_fn: str = "cross_entropy",
             loss_fn_config: dict | None = None) -> bytes:
    """A ForwardBackwardRequest as the SDK serialises it."""
    tokens = [5, 6, 7]
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs={
        "target_tokens": types.TensorData.from_numpy(np.asarray([6, 7, 8], np.int64)),
        "weights": types.TensorData.from_numpy(np.asarray(weights if weights is not None else [1, 1, 1], np.float32))})
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=[datum], loss_fn=loss_fn, loss_fn_config=loss_fn_config),
        model_id=model_id, seq_id=seq_id)
    return request_conv.forward_backward_request_to_proto(request).SerializeToString()


# ---------------------------------------------------------------- keys


AUTHED = [("post", "create_session"), ("post", "create_model"), ("post", "forward_backward"),
          ("post", "retrieve_future"), ("post", "asample"), ("get", "training_runs"), ("get", "checkpoints"),
          ("get", "get_server_capabilities"), ("post", "sessions/sess-x/finish")]


@pytest.mark.parametrize(("method", "path"), AUTHED)
@pytest.mark.parametrize("key", [None, "", "tml-otk_not_a_key", "otk_not_a_key", "tml-"])
def test_a_missing_or_invalid_key_is_401(redis_url: str, method: str, path: str, key: str | None) -> None:
    async def scenario(gw: Gateway):
        if method == "get":
            return await gw.get(path, key=key)
        return await gw.post(path, {"session_id": "sess-x"}, key=key)

    answer = run_with_gateway(redis_url, scenario)
    assert_error(answer, 401, "X-API-Key")


def test_a_valid_key_gets_through_with_or_without_the_sdk_prefix(redis_url: str) -> None:
    async def scenario(gw: Gateway):
        return (await gw.get("get_server_capabilities", key=ACME),
                await gw.get("get_server_capabilities", key="otk_globex_secret"))

    (status, body), (other_status, _) = run_with_gateway(redis_url, scenario)
    assert (status, other_status) == (200, 200)
    assert [m["model_name"] for m in body["supported_models"]] == ["demo", "small-llama", "tiny-llama", "tiny-qwen2"]


# ---------------------------------------------------------------- bodies


@pytest.mark.parametrize("path", ["create_session", "session_heartbeat", "create_model", "get_info", "optim_step",
                                  "save_weights", "load_weights", "save_weights_for_sampler",
                                  "create_sampling_session", "asample", "retrieve_future", "weights_info"])
@pytest.mark.parametrize(("raw", "message"), [(b"{not json", "the body is not JSON"), (b"", "the body is not JSON"),
                                              (b"\xff\xfe{}", "the body is not JSON"),
                                              (b"[1, 2]", "the body must be a JSON object"),
                                              (b'"text"', "the body must be a JSON object")])
def test_a_body_that_is_not_a_json_object_is_400(redis_url: str, path: str, raw: bytes, message: str) -> None:
    answer = run_with_gateway(redis_url, lambda gw: gw.post(path, raw=raw))
    assert_error(answer, 400, message)


@pytest.mark.parametrize("raw", [b"not a protobuf", b'{"model_id": "x"}', b"\x0a\xff", b"\xff\xff\xff"])
def test_a_forward_backward_body_that_is_not_a_protobuf_is_400(redis_url: str, raw: bytes) -> None:
    answer = run_with_gateway(redis_url, lambda gw: gw.post("forward_backward", raw=raw))
    assert_error(answer, 400, "not a ForwardBackwardRequest protobuf")


def test_a_zstd_body_that_does_not_decompress_is_400(redis_url: str) -> None:
    valid = zstandard.ZstdCompressor().compress(fb_bytes("sess-x:train:0", 1))
    broken = valid[:4] + b"\x00" * 8 + valid[12:]  # the magic number, then garbage

    async def scenario(gw: Gateway):
        return (await gw.post("forward_backward", raw=broken, headers={"Content-Encoding": "zstd"}),
                await gw.post("forward_backward", raw=valid[: len(valid) // 2], headers={"Content-Encoding": "zstd"}),
                await gw.post("forward_backward", raw=zstandard.ZstdCompressor().compress(b"\x0a\xff"),
                              headers={"Content-Encoding": "zstd"}),
                await gw.post("forward_backward", raw=valid, headers={"Content-Encoding": "zstd"}))

    broken_answer, truncated, not_proto, decompressed = run_with_gateway(redis_url, scenario)
    assert_error(broken_answer, 400, "the zstd body does not decompress")
    assert_error(truncated, 400, "the zstd body does not decompress")
    assert_error(not_proto, 400, "not a ForwardBackwardRequest protobuf")
    # the well-formed body decompresses and parses: it only names a model nobody has
    assert_error(decompressed, 404, "no live training run 'sess-x:train:0'")


# ---------------------------------------------------------------- sessions, models, futures


def test_unknown_sessions_are_404_and_a_heartbeat_on_one_is_410(redis_url: str) -> None:
    async def scenario(gw: Gateway):
        theirs = await gw.session(GLOBEX)
        model = {"base_model": "demo", "lora_config": {"rank": 8}, "model_seq_id": 0}
        return (await gw.post("create_model", {**model, "session_id": "sess-unknown"}),
                await gw.post("create_model", {**model, "session_id": theirs}),
                await gw.post("sessions/sess-unknown/finish"),
                await gw.post(f"sessions/{theirs}/finish"),
                await gw.post("create_sampling_session", {"session_id": theirs, "base_model": "demo"}),
                await gw.post("load_weights", {"session_id": "sess-unknown", "path": "tinker://m/weights/x"}),
                await gw.post("session_heartbeat", {"session_id": "sess-unknown"}),
                await gw.post("session_heartbeat", {"session_id": theirs}),
                await gw.post("session_heartbeat", {"session_id": theirs}, key=GLOBEX),
                len(gw.service.futures), len(gw.service.sessions))

    *answers, futures, sessions = run_with_gateway(redis_url, scenario)
    unknown, theirs, finish_unknown, finish_theirs, sampler, load, beat_unknown, beat_theirs, beat_own = answers
    for answer in (unknown, finish_unknown, load):
        assert_error(answer, 404, "sess-unknown")
    for answer in (theirs, finish_theirs, sampler):
        assert_error(answer, 404, "no session")
    assert beat_unknown[0] == 410 and beat_theirs[0] == 410
    assert beat_own == (200, {"type": "session_heartbeat"})
    assert (futures, sessions) == (0, 1)  # nothing started, and globex's session is still there


def test_unknown_model_ids_are_404(redis_url: str) -> None:
    async def scenario(gw: Gateway):
        theirs = live_run(gw, await gw.session(GLOBEX), tenant_id="globex").model_id
        answers = []
        for model_id in ("sess-unknown:train:0", theirs):
            answers += [await gw.post("get_info", {"model_id": model_id}),
                        await gw.post("forward_backward", raw=fb_bytes(model_id, 1)),
                        await gw.post("optim_step", {"model_id": model_id, "seq_id": 1,
                                                     "adam_params": {"learning_rate": 1e-4}}),
                        await gw.post("save_weights", {"model_id": model_id, "path": "x", "seq_id": 1}),
                        await gw.post("save_weights_for_sampler", {"model_id": model_id, "seq_id": 1}),
                        await gw.post("load_weights", {"model_id": model_id, "path": "tinker://m/weights/x"})]
        answers += [await gw.get(f"training_runs/{theirs}"), await gw.get(f"training_runs/{theirs}/checkpoints"),
                    await gw.get("samplers/samp-unknown")]
        return answers, len(gw.service.futures)

    answers, futures = run_with_gateway(redis_url, scenario)
    for answer in answers:
        assert_error(answer, 404)
    assert futures == 0


def test_retrieving_an_unknown_or_anothers_future_is_404(redis_url: str) -> None:
    async def scenario(gw: Gateway):
        async def work() -> dict:
            return {"type": "secret"}

        theirs = gw.service.futures.submit("globex", "OptimStep", work())
        return (await gw.post("retrieve_future", {"request_id": "optimstep-unknown"}),
                await gw.post("retrieve_future", {}),
                await gw.post("retrieve_future", {"request_id": theirs}),
                await gw.post("retrieve_future", {"request_id": theirs}, key=GLOBEX))

    unknown, empty, theirs, own = run_with_gateway(redis_url, scenario)
    assert_error(unknown, 404, "optimstep-unknown")
    assert_error(empty, 404)
    assert_error(theirs, 404)
    assert own == (200, {"type": "secret"})


@pytest.mark.parametrize(("change", "status", "fragments"), [
    ({"base_model": "llama-405b"}, 400, ("unknown base_model 'llama-405b'",
                                         "this server offers: demo, small-llama, tiny-llama, tiny-qwen2")),
    ({"base_model": None}, 400, ("unknown base_model ''",)),
    ({"lora_config": {"rank": 0}}, 400, ("lora_config.rank must be an integer in 1..1024, got 0",)),
    ({"lora_config": {"rank": 5000}}, 400, ("got 5000",)),
    ({"lora_config": {"rank": "8"}}, 400, ("got '8'",)),
    ({"lora_config": {"rank": 8, "train_mlp": False, "train_attn": False, "train_unembed": False}}, 400,
     ("nothing would train",)),
    ({"optimizer_config": {"type": "dimuon"}}, 400, ("optimizer_config type 'dimuon' is not supported",)),
])
def test_create_model_refusals_start_no_job(redis_url: str, change: dict, status: int, fragments: tuple) -> None:
    async def scenario(gw: Gateway):
        body = {"session_id": await gw.session(), "model_seq_id": 0, "base_model": "demo",
                "lora_config": {"rank": 8}, **change}
        return await gw.post("create_model", body), len(gw.service.futures)

    answer, futures = run_with_gateway(redis_url, scenario)
    assert_error(answer, status, *fragments)
    assert futures == 0  # no lease was asked for (jobs is None here: asking would fail the future)


# ---------------------------------------------------------------- training calls of a live run


@pytest.mark.parametrize(("payload", "fragments"), [
    ({"weights": [1, 1]}, ("data[0].loss_fn_inputs['weights'] has 2 values for 3",)),
    ({"loss_fn": "gspo"}, ("loss_fn 'gspo' is not supported",)),
    ({"loss_fn_config": {"beta": 0.1}}, ("loss_fn_config key 'beta' is not used by cross_entropy",)),
])
def test_a_refused_forward_backward_is_400_and_its_seq_id_still_counts(redis_url: str, payload: dict,
                                                                       fragments: tuple) -> None:
    async def scenario(gw: Gateway):
        run = live_run(gw, await gw.session())
        answer = await gw.post("forward_backward", raw=fb_bytes(run.model_id, 1, **payload))
        return answer, run.turns.next, len(gw.service.futures)

    answer, next_seq, futures = run_with_gateway(redis_url, scenario)
    assert_error(answer, 400, *fragments)
    assert next_seq == 2  # seq 2 need not wait for a seq 1 that will never run
    assert futures == 0


@pytest.mark.parametrize(("path", "body", "fragments"), [
    ("optim_step", {"optimizer_params": {"type": "dimuon"}}, ("optimizer 'dimuon' is not supported",)),
    ("optim_step", {"adam_params": {"learning_rate": 1e-4, "momentum": 0.9}}, ("unknown field(s) momentum",)),
    ("save_weights", {"path": "../escape"}, ("path '../escape' must be 1-128 letters",)),
    ("save_weights", {"path": "ok", "ttl_seconds": 60}, ("ttl_seconds must be between 3600",)),
    ("save_weights_for_sampler", {"path": "bad name"}, ("path 'bad name'",)),
])
def test_refused_training_calls_are_400_and_their_seq_ids_still_count(redis_url: str, path: str, body: dict,
                                                                      fragments: tuple) -> None:
    async def scenario(gw: Gateway):
        run = live_run(gw, await gw.session())
        answer = await gw.post(path, {"model_id": run.model_id, "seq_id": 1, **body})
        return answer, run.turns.next, len(gw.service.futures)

    answer, next_seq, futures = run_with_gateway(redis_url, scenario)
    assert_error(answer, 400, *fragments)
    assert (next_seq, futures) == (2, 0)


def test_a_non_numeric_adam_param_is_400_and_its_seq_id_still_counts(redis_url: str) -> None:
    async def scenario(gw: Gateway):
        run = live_run(gw, await gw.session())
        answer = await gw.post("optim_step", {"model_id": run.model_id, "seq_id": 1,
                                              "adam_params": {"learning_rate": "fast"}})
        return answer, run.turns.next

    answer, next_seq = run_with_gateway(redis_url, scenario)
    assert_error(answer, 400, "learning_rate")
    assert next_seq == 2


# ---------------------------------------------------------------- sampling


def sampler_of(gw: Gateway, run: TrainingRun) -> str:
    run.sampler_policies["base:demo"] = "policy-1"
    return gw.service.samplers.add(run.tenant_id, run, "policy-1", None, "demo").sampler_id


SAMPLE = {"num_samples": 1, "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
          "sampling_params": {"max_tokens": 4}}


@pytest.mark.parametrize(("change", "fragments"), [
    ({"topk_prompt_logprobs": 5}, ("top-k logprobs",)),
    ({"topk_sample_logprobs": 2}, ("top-k logprobs",)),
    ({"prompt_logprobs_last_n": 3}, ("prompt_logprobs_last_n",)),
    ({"num_samples": 0}, ("num_samples must be an integer in 1..1024",)),
    ({"sampling_params": {"temperature": -1}}, ("temperature must be a number >= 0",)),
    ({"sampling_params": {"stop": [""]}}, ("'' is neither",)),
    ({"prompt": {"chunks": []}}, ("prompt is empty",)),
    ({"prompt": {"chunks": [{"type": "image", "data": "AAAA", "format": "png"}]}}, ("prompt.chunks[0]",)),
    ({"prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, -2]}]}}, ("non-negative token ids",)),
])
def test_asample_refusals_start_no_work(redis_url: str, change: dict, fragments: tuple) -> None:
    async def scenario(gw: Gateway):
        sampler = sampler_of(gw, live_run(gw, await gw.session()))
        answer = await gw.post("asample", {**SAMPLE, "sampling_session_id": sampler, **change})
        return answer, len(gw.service.futures)

    answer, futures = run_with_gateway(redis_url, scenario)
    assert_error(answer, 400, *fragments)
    assert futures == 0


def test_asample_on_an_unknown_or_anothers_sampler_is_404(redis_url: str) -> None:
    async def scenario(gw: Gateway):
        theirs = sampler_of(gw, live_run(gw, await gw.session(GLOBEX), tenant_id="globex"))
        return (await gw.post("asample", {**SAMPLE, "sampling_session_id": "samp-unknown"}),
                await gw.post("asample", {**SAMPLE, "sampling_session_id": theirs}),
                await gw.get(f"samplers/{theirs}"), len(gw.service.futures))

    unknown, theirs, info, futures = run_with_gateway(redis_url, scenario)
    assert_error(unknown, 404, "samp-unknown")
    assert_error(theirs, 404, "no sampling session")
    assert_error(info, 404)
    assert futures == 0


@pytest.mark.parametrize(("body", "status", "fragments"), [
    ({"model_path": "s3://bucket/x"}, 400, ("is not a tinker path",)),
    ({"model_path": "tinker://sess-x:train:0/weights/nope"}, 404, ("no checkpoint",)),
    ({}, 400, ("needs model_path or base_model",)),
    ({"base_model": "llama-405b"}, 400, ("unknown base_model",)),
])
def test_create_sampling_session_refusals(redis_url: str, body: dict, status: int, fragments: tuple) -> None:
    async def scenario(gw: Gateway):
        return await gw.post("create_sampling_session", {"session_id": await gw.session(), **body})

    assert_error(run_with_gateway(redis_url, scenario), status, *fragments)


# ---------------------------------------------------------------- listing and checkpoints


@pytest.mark.parametrize("path", ["training_runs", "checkpoints"])
@pytest.mark.parametrize(("params", "fragment"), [
    ({"limit": "0"}, "limit must be 1..1000"), ({"limit": "1001"}, "limit must be 1..1000"),
    ({"offset": "-1"}, "offset >= 0"), ({"limit": "ten"}, "must be integers"), ({"offset": "1.5"}, "must be integers"),
])
def test_paging_out_of_range_is_400(redis_url: str, path: str, params: dict, fragment: str) -> None:
    assert_error(run_with_gateway(redis_url, lambda gw: gw.get(path, params=params)), 400, fragment)


def test_paging_in_range_answers_an_empty_page(redis_url: str) -> None:
    status, body = run_with_gateway(redis_url, lambda gw: gw.get("training_runs", params={"limit": "1000",
                                                                                          "offset": "5"}))
    assert status == 200
    assert body == {"training_runs": [], "cursor": {"offset": 5, "limit": 1000, "total_count": 0}}


@pytest.mark.parametrize(("tinker_path", "status", "fragment"), [
    ("", 400, "is not a tinker path"), ("tinker://only-a-model", 400, "is not a tinker path"),
    ("tinker://m/weights/x/y", 400, "is not a tinker path"), ("tinker://m/weights/x", 404, "no checkpoint"),
])
def test_weights_info_refusals(redis_url: str, tinker_path: str, status: int, fragment: str) -> None:
    answer = run_with_gateway(redis_url, lambda gw: gw.post("weights_info", {"tinker_path": tinker_path}))
    assert_error(answer, status, fragment)


def test_deleting_an_unknown_checkpoint_is_404(redis_url: str) -> None:
    async def scenario(gw: Gateway):
        response = await gw.client.delete("/api/v1/training_runs/sess-x:train:0/checkpoints/weights/x",
                                          headers=_key(ACME))
        return response.status, await _body(response)

    assert_error(run_with_gateway(redis_url, scenario), 404, "tinker://sess-x:train:0/weights/x")


# ---------------------------------------------------------------- known 500s on type-confused JSON


@pytest.mark.parametrize("case", ["model_seq_id", "lora_config", "num_samples", "seed"])
def test_type_confused_fields_are_400_not_500(redis_url: str, case: str) -> None:
    async def scenario(gw: Gateway):
        session = await gw.session()
        model = {"session_id": session, "base_model": "demo", "model_seq_id": 0, "lora_config": {"rank": 8}}
        if case in ("model_seq_id", "lora_config"):
            return await gw.post("create_model", {**model, case: "x" if case == "model_seq_id" else 5})
        sampler = sampler_of(gw, live_run(gw, session))
        body = {**SAMPLE, "sampling_session_id": sampler}
        if case == "num_samples":
            body["num_samples"] = "x"
        else:
            body["sampling_params"] = {"seed": "x"}
        return await gw.post("asample", body)

    assert_error(run_with_gateway(redis_url, scenario), 400)


def test_the_caller_of_a_request_is_its_keys_tenant() -> None:
    async def scenario():
        auth = TenantAuth(verify)
        return (await auth.caller(ACME), await auth.caller("otk_globex_secret"),
                await TenantAuth(None).caller(None))

    acme, globex, local = asyncio.run(scenario())
    assert acme == Caller(tenant_id="acme", key="otk_acme_secret")
    assert globex == Caller(tenant_id="globex", key="otk_globex_secret")
    assert local.key == "" and local.tenant_id  # auth off: the local system tenant


def test_retrieve_future_long_polls_then_answers_408_try_again_then_the_result(redis_url: str):
    """The SDK's contract: a future still running answers 408 {"type": "try_again"} after the long
    poll (the SDK asks again at once); once done, the result; a failure is {"error", "category"}."""
    async def scenario(gw: Gateway) -> None:
        release = asyncio.Event()

        async def work() -> dict:
            await release.wait()
            return {"type": "optim_step", "metrics": {}}

        async def refused() -> dict:
            raise BadRequest("the datum is wrong")

        request_id = gw.service.futures.submit("acme", "OptimStep", work())
        status, body = await gw.post("retrieve_future", {"request_id": request_id})
        assert status == 408 and body["type"] == "try_again" and body["request_id"] == request_id
        release.set()
        status, body = await gw.post("retrieve_future", {"request_id": request_id})
        assert (status, body) == (200, {"type": "optim_step", "metrics": {}})
        failed = gw.service.futures.submit("acme", "ForwardBackward", refused())
        status, body = await gw.post("retrieve_future", {"request_id": failed})
        assert status == 200 and body == {"error": "the datum is wrong", "category": "user"}
        status, _ = await gw.post("retrieve_future", {"request_id": request_id}, key=GLOBEX)
        assert status == 404  # another tenant's future reads as missing

    run_with_gateway(redis_url, scenario)
