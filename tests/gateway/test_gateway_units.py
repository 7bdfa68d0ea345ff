"""Unit tests of the Tinker gateway's pure parts (no stack): seq_id turns, futures, losses, datums,
the protobuf answers (decoded with the real SDK), sampling parameters, the catalog, and the
records (on the test session's private Redis).

Requests are built with the real `tinker` SDK (its own request_conv) wherever the SDK can build
them, so the gateway is tested against the bytes the SDK sends.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

import numpy as np
import pytest
from google.protobuf import json_format
from tinker import types
from tinker.proto import request_conv, response_conv

from opentinker_api.common.v1 import algorithm_pb2, trajectory_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_gateway import catalog, datums, losses, sampling
from opentinker_gateway.errors import BadRequest, Conflict, GatewayError, NotFound
from opentinker_gateway.futures import Done, Failed, FutureStore, Pending
from opentinker_gateway.records import CheckpointRecord, LoraSettings, Records, RunRecord
from opentinker_gateway.runs import SeqTurns
from opentinker_gateway.wire import tinker_public_pb2 as wire

DEADLINE = 5.0
"""No scenario here should take more than this; a hang fails instead of blocking the suite."""


def run(coroutine_function: Callable[[], object]) -> object:
    async def bounded():
        return await asyncio.wait_for(coroutine_function(), DEADLINE)

    return asyncio.run(bounded())


# ---------------------------------------------------------------- SeqTurns


def test_seq_turns_run_calls_in_seq_id_order_whatever_order_they_arrive() -> None:
    async def scenario():
        turns, order = SeqTurns(), []

        async def call(seq_id: int) -> None:
            async with turns.turn(seq_id):
                order.append(("start", seq_id))
                await asyncio.sleep(0.001)  # a call that takes time: nobody may overtake it
                order.append(("end", seq_id))

        await asyncio.gather(*(call(seq) for seq in (4, 2, 5, 1, 3)))
        return order, turns.next

    order, next_seq = run(scenario)
    assert order == [(step, seq) for seq in (1, 2, 3, 4, 5) for step in ("start", "end")]
    assert next_seq == 6


def test_seq_turns_hold_a_later_call_until_the_earlier_one_finishes() -> None:
    async def scenario():
        turns, release, started = SeqTurns(), asyncio.Event(), []

        async def first() -> None:
            async with turns.turn(1):
                started.append(1)
                await release.wait()

        async def second() -> None:
            async with turns.turn(2):
                started.append(2)

        tasks = [asyncio.create_task(second()), asyncio.create_task(first())]
        for _ in range(20):
            await asyncio.sleep(0)
        held = list(started)
        release.set()
        await asyncio.gather(*tasks)
        return held, started

    held, started = run(scenario)
    assert held == [1]
    assert started == [1, 2]


def test_a_refused_seq_lets_the_later_ones_run() -> None:
    async def scenario():
        turns, order = SeqTurns(), []

        async def call(seq_id: int) -> None:
            async with turns.turn(seq_id):
                order.append(seq_id)

        later = asyncio.create_task(call(3))
        await turns.finish(2)  # refused before seq 1 ran: it still used its number
        await call(1)
        await later
        return order, turns.next

    assert run(scenario) == ([1, 3], 4)


def test_a_call_that_fails_in_its_turn_still_ends_its_turn() -> None:
    async def scenario():
        turns = SeqTurns()
        with pytest.raises(BadRequest):
            async with turns.turn(1):
                raise BadRequest("the Trainer refused it")
        async with turns.turn(2):
            pass
        return turns.next

    assert run(scenario) == 3


def test_a_seq_that_already_ran_is_a_conflict() -> None:
    async def scenario():
        turns = SeqTurns()
        async with turns.turn(1):
            pass
        with pytest.raises(Conflict, match="seq_id 1 already ran") as error:
            async with turns.turn(1):
                pytest.fail("a second run of seq 1 must not start")
        return turns.next, error.value.status

    assert run(scenario) == (2, 409)


@pytest.mark.parametrize("seq_id", [None, 0])
def test_an_unnumbered_call_runs_at_once(seq_id: int | None) -> None:
    async def scenario():
        turns, ran = SeqTurns(), []
        waiting = asyncio.create_task(_enter(turns, 3, ran))  # waits for 1 and 2, which never come
        async with turns.turn(seq_id):
            ran.append(seq_id)
        await turns.finish(seq_id)  # a no-op for unnumbered calls
        next_seq = turns.next
        waiting.cancel()
        return ran, next_seq

    assert run(scenario) == ([seq_id], 1)


async def _enter(turns: SeqTurns, seq_id: int, ran: list) -> None:
    async with turns.turn(seq_id):
        ran.append(seq_id)


# ---------------------------------------------------------------- FutureStore


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_dedupe_key_returns_the_same_future_and_runs_the_work_once() -> None:
    async def scenario():
        store, calls = FutureStore(ttl_seconds=60), []

        async def work(tag: str) -> str:
            calls.append(tag)
            return tag

        duplicate = work("second")
        first = store.submit("acme", "ForwardBackward", work("first"), dedupe_key="model/1")
        second = store.submit("acme", "ForwardBackward", duplicate, dedupe_key="model/1")
        outcome = await store.retrieve("acme", second, wait_seconds=DEADLINE)
        return first, second, calls, outcome, inspect.getcoroutinestate(duplicate), len(store)

    first, second, calls, outcome, duplicate_state, size = run(scenario)
    assert first == second
    assert first.startswith("forwardbackward-")
    assert calls == ["first"]
    assert outcome == Done("first")
    assert duplicate_state == inspect.CORO_CLOSED  # closed unrun: no "never awaited" warning
    assert size == 1


def test_dedupe_keys_are_per_tenant() -> None:
    async def scenario():
        store = FutureStore(ttl_seconds=60)

        async def work(value: str) -> str:
            return value

        ours = store.submit("acme", "Sample", work("acme's"), dedupe_key="sampler/1")
        theirs = store.submit("globex", "Sample", work("globex's"), dedupe_key="sampler/1")
        return (ours != theirs, await store.retrieve("acme", ours, wait_seconds=DEADLINE),
                await store.retrieve("globex", theirs, wait_seconds=DEADLINE))

    assert run(scenario) == (True, Done("acme's"), Done("globex's"))


def test_another_tenants_request_id_is_not_found() -> None:
    async def scenario():
        store = FutureStore(ttl_seconds=60)

        async def work() -> str:
            return "secret"

        request_id = store.submit("acme", "OptimStep", work())
        with pytest.raises(NotFound, match=request_id):
            await store.retrieve("globex", request_id, wait_seconds=0.01)
        with pytest.raises(NotFound):
            await store.retrieve("acme", "optimstep-unknown", wait_seconds=0.01)
        return await store.retrieve("acme", request_id, wait_seconds=DEADLINE)

    assert run(scenario) == Done("secret")


def test_retrieve_is_pending_before_the_work_is_done_and_done_after() -> None:
    async def scenario():
        store, release = FutureStore(ttl_seconds=60), asyncio.Event()

        async def work() -> bytes:
            await release.wait()
            return b"\x01\x02"

        request_id = store.submit("acme", "ForwardBackward", work())
        before = await store.retrieve("acme", request_id, wait_seconds=0.02)
        release.set()
        after = await store.retrieve("acme", request_id, wait_seconds=DEADLINE)
        again = await store.retrieve("acme", request_id, wait_seconds=0)  # retrieving twice is fine
        return before, after, again

    assert run(scenario) == (Pending(), Done(b"\x01\x02"), Done(b"\x01\x02"))


def test_a_gateway_error_fails_the_future_as_it_was_raised() -> None:
    async def scenario():
        store, error = FutureStore(ttl_seconds=60), BadRequest("data[0] is wrong")

        async def work() -> None:
            raise error

        outcome = await store.retrieve("acme", store.submit("acme", "Forward", work()), wait_seconds=DEADLINE)
        return outcome, error

    outcome, error = run(scenario)
    assert isinstance(outcome, Failed)
    assert outcome.error is error
    assert outcome.error.category == "user"


def test_another_exception_becomes_a_gateway_error_naming_the_kind_and_the_exception() -> None:
    async def scenario():
        store = FutureStore(ttl_seconds=60)

        async def work() -> None:
            raise KeyError("lost_field")

        return await store.retrieve("acme", store.submit("acme", "SaveWeights", work()), wait_seconds=DEADLINE)

    outcome = run(scenario)
    assert isinstance(outcome, Failed)
    assert type(outcome.error) is GatewayError
    assert (outcome.error.status, outcome.error.category) == (500, "server")
    assert outcome.error.message == "SaveWeights failed: KeyError: 'lost_field'"


def test_prune_forgets_finished_futures_after_the_ttl_only() -> None:
    async def scenario():
        clock = Clock()
        store, release = FutureStore(ttl_seconds=60, clock=clock), asyncio.Event()

        async def quick() -> str:
            return "done"

        async def slow() -> str:
            await release.wait()
            return "late"

        done_id = store.submit("acme", "OptimStep", quick(), dedupe_key="model/1")
        pending_id = store.submit("acme", "OptimStep", slow(), dedupe_key="model/2")
        await store.retrieve("acme", done_id, wait_seconds=DEADLINE)  # finished at t=1000
        clock.now = 1060.0
        at_ttl = store.prune()
        clock.now = 1060.5
        after_ttl = store.prune()
        with pytest.raises(NotFound):
            await store.retrieve("acme", done_id, wait_seconds=0)
        # the dedupe key went with it: the same key now starts new work
        rerun_id = store.submit("acme", "OptimStep", quick(), dedupe_key="model/1")
        rerun = await store.retrieve("acme", rerun_id, wait_seconds=DEADLINE)  # finished at t=1060.5
        # a future still running is never pruned, however old
        clock.now = 10_000.0
        kept = store.prune()
        pending = await store.retrieve("acme", pending_id, wait_seconds=0)
        release.set()
        await store.retrieve("acme", pending_id, wait_seconds=DEADLINE)
        return at_ttl, after_ttl, (rerun_id != done_id, rerun), kept, pending

    at_ttl, after_ttl, rerun_is_new, kept, pending = run(scenario)
    assert (at_ttl, after_ttl) == (0, 1)
    assert rerun_is_new == (True, Done("done"))
    assert kept == 1  # only the rerun, finished at t=1060.5, goes at t=10000
    assert pending == Pending()


# ---------------------------------------------------------------- losses


def _trainer_accepts(fields: dict) -> None:
    """The LossConfig the gateway sends, read the way the Trainer reads it (json -> proto ->
    its validated domain config): raises the Trainer's ValidationError when refused."""
    from opentinker_trainer.config import LossAggregation, LossConfig, LossFunction

    message = json_format.ParseDict(fields, algorithm_pb2.LossConfig())
    function = algorithm_pb2.LossFunction.Name(message.function).removeprefix("LOSS_FUNCTION_")
    aggregation = algorithm_pb2.LossAggregation.Name(message.aggregation).removeprefix("LOSS_AGGREGATION_")
    LossConfig(function=LossFunction[function], aggregation=LossAggregation[aggregation],
               clip_low=message.clip_low, clip_high=message.clip_high, dro_beta=message.dro_beta)


LOSS_CASES = [
    ("cross_entropy", None, {"function": "LOSS_FUNCTION_CROSS_ENTROPY"}),
    ("importance_sampling", {}, {"function": "LOSS_FUNCTION_IMPORTANCE_SAMPLING"}),
    ("ppo", None, {"function": "LOSS_FUNCTION_PPO_CLIP", "clip_low": 0.2, "clip_high": 0.2}),
    ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.5},
     {"function": "LOSS_FUNCTION_PPO_CLIP", "clip_low": 0.1, "clip_high": 0.5}),
    ("cispo", None, {"function": "LOSS_FUNCTION_CISPO", "clip_low": 1.0, "clip_high": 3.0}),
    ("cispo", {"clip_high_threshold": 2.0}, {"function": "LOSS_FUNCTION_CISPO", "clip_low": 1.0, "clip_high": 1.0}),
    ("dro", {"beta": 0.05}, {"function": "LOSS_FUNCTION_DRO", "dro_beta": 0.05}),
]


@pytest.mark.parametrize(("name", "config", "expected"), LOSS_CASES)
def test_every_tinker_loss_maps_to_the_trainers_loss_config(name: str, config: dict | None, expected: dict) -> None:
    fields = losses.loss_config(losses.tinker_loss(name), config)
    assert set(fields) == {"aggregation", *expected}
    assert fields["aggregation"] == "LOSS_AGGREGATION_SUM"
    for key, value in expected.items():
        assert fields[key] == (pytest.approx(value) if isinstance(value, float) else value), key
    _trainer_accepts(fields)


def test_each_loss_names_the_inputs_a_datum_must_carry() -> None:
    assert losses.tinker_loss("cross_entropy").inputs == ("weights",)
    for name in ("importance_sampling", "ppo", "cispo", "dro"):
        assert set(losses.tinker_loss(name).inputs) == {"logprobs", "advantages"}
        assert losses.tinker_loss(name).uses_advantages
    assert not losses.tinker_loss("cross_entropy").uses_advantages


@pytest.mark.parametrize("name", ["gspo", "stable_reinforce", "", "PPO"])
def test_an_unknown_loss_is_a_bad_request_naming_it(name: str) -> None:
    with pytest.raises(BadRequest, match=f"loss_fn {name!r} is not supported") as error:
        losses.tinker_loss(name)
    assert "cross_entropy, importance_sampling, ppo, cispo, dro" in error.value.message


@pytest.mark.parametrize(("name", "key"), [("cross_entropy", "beta"), ("ppo", "beta"), ("dro", "clip_low_threshold"),
                                           ("importance_sampling", "clip_high_threshold"), ("cispo", "temperature")])
def test_an_unknown_config_key_is_a_bad_request_naming_key_and_loss(name: str, key: str) -> None:
    with pytest.raises(BadRequest, match=f"key {key!r} is not used by {name}"):
        losses.loss_config(losses.tinker_loss(name), {key: 0.5})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), "0.9"])
def test_a_config_value_that_is_not_a_finite_number_is_refused(value: object) -> None:
    with pytest.raises(BadRequest, match="'clip_low_threshold' must be a finite number"):
        losses.loss_config(losses.tinker_loss("ppo"), {"clip_low_threshold": value})


@pytest.mark.parametrize("config", [None, {}, {"beta": 0.0}, {"beta": -1.0}])
def test_dro_requires_a_positive_beta(config: dict | None) -> None:
    with pytest.raises(BadRequest, match="dro needs beta > 0"):
        losses.loss_config(losses.tinker_loss("dro"), config)


@pytest.mark.parametrize(("name", "config"), [("ppo", {"clip_low_threshold": 1.1}),
                                              ("ppo", {"clip_high_threshold": 0.9}),
                                              ("ppo", {"clip_low_threshold": -0.1}),
                                              ("cispo", {"clip_low_threshold": 1.5, "clip_high_threshold": 2.0})])
def test_thresholds_on_the_wrong_side_of_one_are_refused(name: str, config: dict) -> None:
    rule = ("ppo needs 0 < clip_low_threshold < 1 < clip_high_threshold" if name == "ppo"
            else "cispo needs 0 <= clip_low_threshold <= 1 <= clip_high_threshold")
    with pytest.raises(BadRequest, match=rule):
        losses.loss_config(losses.tinker_loss(name), config)


@pytest.mark.parametrize("config", [{"clip_low_threshold": 1.0}, {"clip_low_threshold": 0.0},
                                    {"clip_high_threshold": 1.0}])
def test_every_ppo_config_the_gateway_accepts_the_trainer_accepts(config: dict) -> None:
    try:
        fields = losses.loss_config(losses.tinker_loss("ppo"), config)
    except BadRequest:
        return  # refused up front, naming the threshold: fine
    _trainer_accepts(fields)


# ---------------------------------------------------------------- datums


def _tensor(values: object, dtype: type = np.float32) -> types.TensorData:
    return types.TensorData.from_numpy(np.asarray(values, dtype=dtype))


def sdk_datum(tokens: list[int], targets: list[int] | None = None, **inputs: list[float]) -> types.Datum:
    """A datum as a user builds it with the SDK (next-token targets unless given)."""
    targets = targets if targets is not None else [*tokens[1:], 99]
    return types.Datum(model_input=types.ModelInput.from_ints(tokens),
                       loss_fn_inputs={"target_tokens": _tensor(targets, np.int64),
                                       **{name: _tensor(values) for name, values in inputs.items()}})


def wire_request(data: list[types.Datum], loss_fn: str = "cross_entropy", config: dict | None = None
                 ) -> wire.ForwardBackwardRequest:
    """The ForwardBackwardRequest as the gateway parses it from the SDK's bytes."""
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=data, loss_fn=loss_fn, loss_fn_config=config),
        model_id="sess-x:train:0", seq_id=1)
    parsed = wire.ForwardBackwardRequest()
    parsed.ParseFromString(request_conv.forward_backward_request_to_proto(request).SerializeToString())
    return parsed


def prepare(request: wire.ForwardBackwardRequest) -> list[datums.PreparedDatum]:
    return datums.prepare(request.data, losses.tinker_loss(request.loss_fn))


def test_cross_entropy_datums_become_one_token_list_with_the_mask_shifted_by_one() -> None:
    request = wire_request([sdk_datum([5, 6, 7, 8], [6, 7, 8, 9], weights=[0, 1, 1, 0.5]),
                            sdk_datum([3], [4], weights=[1])])
    first, second = prepare(request)
    assert list(first.datum.tokens) == [5, 6, 7, 8, 9]
    assert list(first.datum.loss_mask) == [0, 0, 1, 1, 0.5]
    assert list(first.datum.advantages) == [] and list(first.datum.sampling_logprobs) == []
    assert first.inputs["target_tokens"].tolist() == [6, 7, 8, 9]
    assert first.inputs["weights"].tolist() == [0, 1, 1, 0.5]
    assert (list(second.datum.tokens), list(second.datum.loss_mask)) == ([3, 4], [0, 1])


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo", "dro"])
def test_policy_datums_carry_advantages_and_sampling_logprobs_shifted_by_one(loss_fn: str) -> None:
    request = wire_request([sdk_datum([1, 2, 3], [2, 3, 4], advantages=[0.0, 1.5, -2.0],
                                      logprobs=[-0.5, -1.0, -1.5])], loss_fn)
    (item,) = prepare(request)
    assert list(item.datum.tokens) == [1, 2, 3, 4]
    assert list(item.datum.loss_mask) == [0, 1, 1, 1]
    assert list(item.datum.advantages) == [0, 0.0, 1.5, -2.0]
    assert list(item.datum.sampling_logprobs) == [0, -0.5, -1.0, -1.5]


def test_target_logprobs_drop_the_trainers_index_zero() -> None:
    assert datums.target_logprobs([0.0, -1.0, -2.5]).tolist() == [-1.0, -2.5]
    assert datums.target_logprobs([0.0, -1.0]).dtype == np.float32


def _wire_datum(request: wire.ForwardBackwardRequest, index: int = 1) -> wire.Datum:
    return request.data[index]


def _with_input(name: str, tensor: wire.Tensor) -> Callable[[wire.Datum], None]:
    def change(datum: wire.Datum) -> None:
        datum.loss_fn_inputs[name].CopyFrom(tensor)

    return change


def _dense(values: object, dtype: int = wire.DTYPE_FLOAT32, shape: list[int] | None = None) -> wire.Tensor:
    numpy_dtype = {wire.DTYPE_FLOAT32: np.float32, wire.DTYPE_INT64: np.int64}[dtype]
    array = np.asarray(values, dtype=numpy_dtype)
    return wire.Tensor(dtype=dtype, dense=array.tobytes(), shape=shape if shape is not None else [array.size])


def _drop_input(name: str) -> Callable[[wire.Datum], None]:
    return lambda datum: datum.loss_fn_inputs.pop(name)


def _image_chunk(datum: wire.Datum) -> None:
    datum.model_input.add().image.data = b"\x89PNG"


def _empty_model_input(datum: wire.Datum) -> None:
    del datum.model_input[:]


def _sparse(datum: wire.Datum) -> None:
    datum.loss_fn_inputs["weights"].ClearField("dense")
    datum.loss_fn_inputs["weights"].sparse_csr.values = np.ones(1, np.float32).tobytes()


def _bfloat16(datum: wire.Datum) -> None:
    datum.loss_fn_inputs["weights"].dtype = wire.DTYPE_BFLOAT16


def _ragged_bytes(datum: wire.Datum) -> None:
    datum.loss_fn_inputs["weights"].dense = b"\x00" * 14


REFUSALS = [
    ("targets not shifted", _with_input("target_tokens", _dense([7, 7, 8, 9], wire.DTYPE_INT64)),
     "data[1].loss_fn_inputs.target_tokens[0] is not model_input[1] and it trains"),
    ("too few weights", _with_input("weights", _dense([1, 1, 1])),
     "data[1].loss_fn_inputs['weights'] has 3 values for 4 model_input tokens"),
    ("too many targets", _with_input("target_tokens", _dense([6, 7, 8, 9, 10], wire.DTYPE_INT64)),
     "data[1].loss_fn_inputs['target_tokens'] has 5 values for 4"),
    ("missing weights", _drop_input("weights"), "data[1].loss_fn_inputs['weights'] is missing"),
    ("missing targets", _drop_input("target_tokens"), "data[1].loss_fn_inputs['target_tokens'] is missing"),
    ("an extra input", _with_input("advantages", _dense([1, 1, 1, 1])),
     "data[1].loss_fn_inputs['advantages'] is not an input of cross_entropy"),
    ("NaN weight", _with_input("weights", _dense([1, float("nan"), 1, 1])),
     "data[1].loss_fn_inputs['weights'] holds NaN or infinity"),
    ("infinite weight", _with_input("weights", _dense([1, 1, float("inf"), 1])),
     "data[1].loss_fn_inputs['weights'] holds NaN or infinity"),
    ("a 2-D tensor", _with_input("weights", _dense([[1, 1], [1, 1]], shape=[2, 2])),
     "data[1].loss_fn_inputs['weights']: shape [2, 2] is not supported"),
    ("a sparse tensor", _sparse, "data[1].loss_fn_inputs['weights']: sparse tensors are not supported"),
    ("a bfloat16 tensor", _bfloat16, "data[1].loss_fn_inputs['weights']: dtype DTYPE_BFLOAT16 is not supported"),
    ("ragged bytes", _ragged_bytes, "data[1].loss_fn_inputs['weights']: 14 bytes is not a whole number of float32"),
    ("an image chunk", _image_chunk, "data[1].model_input.chunks[1]: only encoded_text chunks are supported"),
    ("empty model_input", _empty_model_input, "data[1].model_input is empty"),
]


@pytest.mark.parametrize(("change", "message"), [case[1:] for case in REFUSALS], ids=[case[0] for case in REFUSALS])
def test_a_malformed_datum_is_refused_naming_its_index_and_field(change: Callable, message: str) -> None:
    request = wire_request([sdk_datum([1, 2], weights=[1, 1]), sdk_datum([5, 6, 7, 8], weights=[1, 1, 1, 1])])
    change(_wire_datum(request))
    with pytest.raises(BadRequest) as error:
        prepare(request)
    assert message in error.value.message


@pytest.mark.parametrize("name", ["advantages", "logprobs"])
def test_a_nan_policy_input_is_refused_naming_it(name: str) -> None:
    values = {"advantages": [1.0, 1.0], "logprobs": [-1.0, -1.0]}
    values[name] = [1.0, float("nan")]
    request = wire_request([sdk_datum([1, 2], **values)], "ppo")
    with pytest.raises(BadRequest, match=rf"data\[0\]\.loss_fn_inputs\['{name}'\] holds NaN"):
        prepare(request)


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(BadRequest, match="data is empty"):
        datums.prepare([], losses.tinker_loss("cross_entropy"))


def test_token_bytes_that_are_not_int32_are_refused_naming_the_datum() -> None:
    request = wire_request([sdk_datum([1, 2], weights=[1, 1])])
    request.data[0].model_input[0].encoded_text.tokens = b"\x01\x00\x00"
    with pytest.raises(BadRequest, match=r"data\[0\]\.model_input"):
        prepare(request)


# ---- elementwise_loss against the Trainer's formulas (numpy twins of opentinker_trainer/losses.py)

LOG_RATIO_LIMIT = 20.0


def _ratio(logprobs: np.ndarray, old: np.ndarray) -> np.ndarray:
    return np.exp(np.clip(logprobs - old, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


def trainer_loss_T(name: str, config: dict, logprobs_T: np.ndarray, datum) -> np.ndarray:
    """The Trainer's per-token loss over its own index t (0 never trains), masked: what its SUM
    aggregation adds up."""
    mask = np.asarray(datum.loss_mask, np.float64)
    if name == "cross_entropy":
        return -logprobs_T * mask
    advantages, old = np.asarray(datum.advantages, np.float64), np.asarray(datum.sampling_logprobs, np.float64)
    ratio = _ratio(logprobs_T, old)
    if name == "importance_sampling":
        loss = -ratio * advantages
    elif name == "ppo":
        clipped = np.clip(ratio, 1 - config["clip_low"], 1 + config["clip_high"])
        loss = np.maximum(-advantages * ratio, -advantages * clipped)
    elif name == "cispo":
        loss = -np.clip(ratio, 1 - config["clip_low"], 1 + config["clip_high"]) * advantages * logprobs_T
    else:
        loss = -(advantages * logprobs_T - 0.5 * config["dro_beta"] * (logprobs_T - old) ** 2)
    return loss * mask


LOSS_CONFIGS = [("cross_entropy", None), ("importance_sampling", None), ("ppo", None),
                ("ppo", {"clip_low_threshold": 0.95, "clip_high_threshold": 1.05}), ("cispo", None),
                ("cispo", {"clip_low_threshold": 0.5, "clip_high_threshold": 1.1}), ("dro", {"beta": 0.3})]


def _random_request(rng: np.random.Generator, loss_fn: str, config: dict | None, spread: float = 1.0):
    data = []
    for length in (1, 5, 17):
        tokens = rng.integers(0, 250, length).tolist()
        old = -rng.exponential(1.0, length)
        inputs = ({"weights": rng.choice([0.0, 0.5, 1.0, 2.0], length)} if loss_fn == "cross_entropy" else
                  {"advantages": rng.normal(0, 1, length), "logprobs": old})
        data.append(sdk_datum(tokens, **inputs))
    request = wire_request(data, loss_fn, config)
    new = [np.minimum(np.asarray(d.loss_fn_inputs["logprobs"].to_numpy() if "logprobs" in d.loss_fn_inputs
                                 else -rng.exponential(1.0, len(d.model_input.to_ints())))
                      + rng.normal(0, spread, len(d.model_input.to_ints())), 0).astype(np.float32) for d in data]
    return request, new


@pytest.mark.parametrize(("loss_fn", "config"), LOSS_CONFIGS)
def test_elementwise_loss_is_the_trainers_loss_position_by_position(loss_fn: str, config: dict | None) -> None:
    rng = np.random.default_rng(hash((loss_fn, str(config))) % 2**32)
    loss = losses.tinker_loss(loss_fn)
    fields = losses.loss_config(loss, config)
    request, new_logprobs = _random_request(rng, loss_fn, config)
    total_ours = total_trainer = 0.0
    for item, logprobs in zip(prepare(request), new_logprobs, strict=True):
        ours = datums.elementwise_loss(loss, fields, logprobs, item.inputs)
        trainer_T = trainer_loss_T(loss_fn, fields, np.concatenate([[0.0], logprobs]).astype(np.float64), item.datum)
        assert trainer_T[0] == 0.0  # index 0 never trains
        np.testing.assert_allclose(ours, trainer_T[1:], rtol=1e-5, atol=1e-6)
        total_ours += float(ours.astype(np.float64).sum())
        total_trainer += float(trainer_T.sum())
    assert total_ours == pytest.approx(total_trainer, rel=1e-5, abs=1e-5)


def test_the_clipped_losses_do_clip_on_this_data() -> None:
    """The comparison above is only worth something if some ratios leave the clip range."""
    rng = np.random.default_rng(7)
    request, new_logprobs = _random_request(rng, "ppo", None)
    ratios = np.concatenate([np.exp(new - item.inputs["logprobs"])
                             for item, new in zip(prepare(request), new_logprobs, strict=True)])
    assert (ratios > 1.2).any() and (ratios < 0.8).any()


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo"])
def test_elementwise_loss_clamps_the_log_ratio_as_the_trainer_does(loss_fn: str) -> None:
    loss = losses.tinker_loss(loss_fn)
    fields = losses.loss_config(loss, None)
    (item,) = prepare(wire_request([sdk_datum([1, 2], advantages=[-1.0, 1.0], logprobs=[-30.0, -1.0])], loss_fn))
    logprobs = np.asarray([-0.5, -1.0], np.float32)
    trainer_T = trainer_loss_T(loss_fn, fields, np.concatenate([[0.0], logprobs]), item.datum)
    np.testing.assert_allclose(datums.elementwise_loss(loss, fields, logprobs, item.inputs), trainer_T[1:], rtol=1e-5)


# ---------------------------------------------------------------- protobuf answers, read by the SDK


def test_forward_backward_output_decodes_with_the_sdk_into_the_same_arrays_and_metrics() -> None:
    outputs = [{"logprobs": np.asarray([-0.25, -1.5, -3.0], np.float32),
                "elementwise_loss": np.asarray([0.25, 1.5, 0.0], np.float32)},
               {"logprobs": np.asarray([-2.0], np.float32), "elementwise_loss": np.asarray([2.0], np.float32)}]
    metrics = {"loss:sum": 3.75, "entropy:mean": 1.25}
    decoded = response_conv.deserialize_forward_backward_output(datums.forward_backward_output(outputs, metrics))
    assert decoded.loss_fn_output_type == "ArrayRecord"
    assert decoded.metrics == metrics
    assert len(decoded.loss_fn_outputs) == 2
    for sent, received in zip(outputs, decoded.loss_fn_outputs, strict=True):
        assert set(received) == {"logprobs", "elementwise_loss"}
        for name, array in sent.items():
            assert received[name].dtype == "float32"
            assert received[name].shape == [array.size]
            assert received[name].to_numpy().tolist() == array.tolist()


def test_a_forward_backward_output_without_datums_decodes_empty() -> None:
    decoded = response_conv.deserialize_forward_backward_output(datums.forward_backward_output([], {"loss:sum": 0.0}))
    assert decoded.loss_fn_outputs == []
    assert decoded.metrics == {"loss:sum": 0.0}


@pytest.mark.parametrize(("dtype", "numpy_dtype", "sdk_dtype"), [(wire.DTYPE_FLOAT32, np.float32, "float32"),
                                                                 (wire.DTYPE_INT64, np.int64, "int64")])
def test_batched_holds_each_datum_between_its_byte_offsets(dtype: int, numpy_dtype: type, sdk_dtype: str) -> None:
    arrays = [np.asarray([1, 2, 3]), np.asarray([], dtype=np.int64), np.asarray([7])]
    tensor = datums.batched(arrays, dtype)
    itemsize = np.dtype(numpy_dtype).itemsize
    assert np.frombuffer(tensor.offsets, np.int64).tolist() == [0, 3 * itemsize, 3 * itemsize, 4 * itemsize]
    record = wire.ArrayRecord(type_tag="ArrayRecord", num_datums=3)
    record.fields["target_tokens"].CopyFrom(tensor)
    message = wire.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record])
    decoded = response_conv.deserialize_forward_backward_output(message.SerializeToString())
    assert [o["target_tokens"].to_numpy().tolist() for o in decoded.loss_fn_outputs] == [[1, 2, 3], [], [7]]
    assert {o["target_tokens"].dtype for o in decoded.loss_fn_outputs} == {sdk_dtype}


def _completions(prompt_logprobs: list[float]) -> rollout_pb.PromptCompletions:
    result = rollout_pb.PromptCompletions(prompt_length=len(prompt_logprobs), prompt_logprobs=prompt_logprobs)
    result.completions.add(tokens=[10, 11, 12], logprobs=[-0.5, -0.25, -2.0], stop_reason=trajectory_pb2.STOP_REASON_DONE)
    result.completions.add(tokens=[13], logprobs=[-1.0], stop_reason=trajectory_pb2.STOP_REASON_MAX_TURN_TOKENS)
    return result


def test_sample_response_decodes_with_the_sdk() -> None:
    decoded = response_conv.deserialize_sample_response(
        sampling.sample_response(_completions([0.0, -1.5, -2.25]), prompt_logprobs=True))
    assert [s.stop_reason for s in decoded.sequences] == ["stop", "length"]
    assert [s.tokens for s in decoded.sequences] == [[10, 11, 12], [13]]
    assert [s.logprobs for s in decoded.sequences] == [[-0.5, -0.25, -2.0], [-1.0]]
    assert decoded.prompt_logprobs == [None, -1.5, -2.25]  # the first prompt token has no context


def test_a_sample_response_without_prompt_logprobs_has_none() -> None:
    decoded = response_conv.deserialize_sample_response(
        sampling.sample_response(_completions([0.0, -1.5]), prompt_logprobs=False))
    assert decoded.prompt_logprobs is None
    assert len(decoded.sequences) == 2


# ---------------------------------------------------------------- sampling parameters


def test_sampling_params_defaults() -> None:
    params = sampling.sampling_params({}, 3)
    assert params.n == 3
    assert (params.temperature, params.top_p, params.top_k) == (1.0, 1.0, 0)
    assert params.max_new_tokens == 0 and params.seed == sampling.UNSEEDED
    assert list(params.stop) == [] and list(params.stop_token_ids) == []


def test_sampling_params_carry_what_the_sdk_sends() -> None:
    body = types.SamplingParams(max_tokens=12, temperature=0.7, top_p=0.9, top_k=40, seed=5, stop=["\n\n", "###"])
    params = sampling.sampling_params(body.model_dump(), 2)
    assert (params.n, params.max_new_tokens, params.top_k, params.seed) == (2, 12, 40, 5)
    assert (params.temperature, params.top_p) == (pytest.approx(0.7), pytest.approx(0.9))
    assert list(params.stop) == ["\n\n", "###"] and list(params.stop_token_ids) == []


def test_seed_zero_is_a_seed_and_no_seed_is_unseeded() -> None:
    assert sampling.sampling_params({"seed": 0}, 1).seed == sampling.SEED_FOR_ZERO != sampling.UNSEEDED
    assert sampling.sampling_params({"seed": None}, 1).seed == sampling.UNSEEDED
    assert sampling.sampling_params({"seed": 123}, 1).seed == 123


@pytest.mark.parametrize(("top_k", "expected"), [(-1, 0), (1, 1), (50, 50)])
def test_top_k_minus_one_means_no_limit(top_k: int, expected: int) -> None:
    assert sampling.sampling_params({"top_k": top_k}, 1).top_k == expected


@pytest.mark.parametrize(("stop", "strings", "token_ids"), [
    ("END", ["END"], []), (["a", "b"], ["a", "b"], []), ([2, 0], [], [2, 0]), (["x", 7], ["x"], [7]), ([], [], [])])
def test_stop_strings_and_stop_token_ids(stop: object, strings: list, token_ids: list) -> None:
    params = sampling.sampling_params({"stop": stop}, 1)
    assert (list(params.stop), list(params.stop_token_ids)) == (strings, token_ids)


@pytest.mark.parametrize(("body", "num_samples", "message"), [
    ({}, 0, "num_samples must be 1..1024"),
    ({}, 1025, "num_samples must be 1..1024"),
    ({"max_tokens": 0}, 1, "max_tokens must be a positive integer"),
    ({"max_tokens": "16"}, 1, "max_tokens must be a positive integer"),
    ({"max_tokens": 1.5}, 1, "max_tokens must be a positive integer"),
    ({"temperature": -0.1}, 1, "temperature must be a number >= 0"),
    ({"temperature": float("nan")}, 1, "temperature must be a number"),
    ({"temperature": "hot"}, 1, "temperature must be a number"),
    ({"top_p": 1.5}, 1, r"top_p must be a number in \[0, 1\]"),
    ({"top_p": -0.5}, 1, r"top_p must be a number in \[0, 1\]"),
    ({"top_k": -2}, 1, "top_k must be -1"),
    ({"top_k": 2.5}, 1, "top_k must be -1"),
    ({"stop": {"a": 1}}, 1, "stop must be a string"),
    ({"stop": [""]}, 1, "'' is neither"),
    ({"stop": [-1]}, 1, "-1 is neither"),
    ({"stop": [True]}, 1, "True is neither"),
    ({"stop": [["x"]]}, 1, r"\['x'\] is neither"),
])
def test_sampling_params_refusals(body: dict, num_samples: int, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        sampling.sampling_params(body, num_samples)


@pytest.mark.parametrize("body", [{"seed": "7"}, {"seed": 1.5}, {"seed": 2**70}, {"stop": [2**40]}, {"top_k": 2**40}])
def test_unrepresentable_integers_are_bad_requests(body: dict) -> None:
    with pytest.raises(BadRequest):
        sampling.sampling_params(body, 1)


# ---------------------------------------------------------------- catalog


def test_catalog_builtins_are_the_ml_packages_builtins() -> None:
    from opentinker_runtime.ml.models import BUILTIN_MODELS  # imports torch: the one slow test here

    assert sorted(catalog.BUILTIN_MODELS) == sorted(BUILTIN_MODELS)


@pytest.mark.parametrize("text", ["", " ", ",", " , "])
def test_an_empty_catalog_setting_offers_every_builtin_under_its_own_name(text: str) -> None:
    models = catalog.parse_catalog(text)
    assert set(models) == set(catalog.BUILTIN_MODELS)
    for name, model in models.items():
        assert (model.name, model.builtin, model.seed, model.path) == (name, name, 0, "")
        assert model.reference() == {"builtin": {"name": name, "seed": 0}}
        assert model.arch == name


def test_catalog_entries_name_builtins_with_seeds_and_absolute_directories() -> None:
    models = catalog.parse_catalog(" demo = builtin:tiny-llama:7 , HuggingFaceTB/SmolLM2-135M-Instruct=/models/smollm2,"
                                   "plain=builtin:tiny-qwen2")
    assert set(models) == {*catalog.BUILTIN_MODELS, "demo", "HuggingFaceTB/SmolLM2-135M-Instruct", "plain"}
    assert models["demo"].reference() == {"builtin": {"name": "tiny-llama", "seed": 7}}
    assert models["demo"].arch == "tiny-llama"
    assert models["plain"].reference() == {"builtin": {"name": "tiny-qwen2", "seed": 0}}
    smol = models["HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert smol.reference() == {"local": {"path": "/models/smollm2"}}
    assert smol.arch == "smollm2"


def test_a_later_catalog_entry_wins_even_over_a_builtin_name() -> None:
    models = catalog.parse_catalog("tiny-llama=/models/real-llama,x=builtin:small-llama,x=builtin:tiny-qwen2")
    assert models["tiny-llama"].reference() == {"local": {"path": "/models/real-llama"}}
    assert models["x"].builtin == "tiny-qwen2"


@pytest.mark.parametrize(("text", "message"), [
    ("demo=models/smollm2", "'models/smollm2' must be builtin:<name> or an absolute model directory"),
    ("demo=./smollm2", "must be builtin:<name> or an absolute"),
    ("demo=builtin:huge-llama", "builtin 'huge-llama' is not one of small-llama, tiny-llama, tiny-qwen2"),
    ("demo=builtin:tiny-llama:-1", "the seed in 'tiny-llama:-1' must be a non-negative integer"),
    ("demo=builtin:tiny-llama:x", "must be a non-negative integer"),
    ("demo", "'demo' is not NAME=SOURCE"),
    ("=builtin:tiny-llama", "is not NAME=SOURCE"),
    ("demo=", "is not NAME=SOURCE"),
    ("ok=builtin:tiny-llama,broken", "'broken' is not NAME=SOURCE"),
])
def test_catalog_refusals(text: str, message: str) -> None:
    with pytest.raises(catalog.CatalogError, match=message.replace("(", r"\(").replace(")", r"\)")):
        catalog.parse_catalog(text)


# ---------------------------------------------------------------- records (Redis)


LORA = LoraSettings(rank=8, seed=3, train_mlp=False)


def _checkpoint(path: str, *, model_id: str = "sess-a:train:0", created: float = 1.0,
                expires_at: float | None = None) -> CheckpointRecord:
    return CheckpointRecord(tinker_path=path, model_id=model_id, kind="training", checkpoint_id=f"ckpt-{created}",
                            base_model="tiny-llama", lora=LORA, step=4, size_bytes=1234, created=created,
                            expires_at=expires_at, user_metadata={"note": "x"})


def records_scenario(redis_url: str, scenario: Callable[[Records], object]) -> object:
    from opentinker_runtime.core.redis_store import connect

    async def body():
        redis = connect(redis_url)
        try:
            return await scenario(Records(redis))
        finally:
            await redis.aclose()

    return run(body)


def test_run_records_round_trip_per_tenant(redis_url: str) -> None:
    first = RunRecord(model_id="sess-a:train:0", base_model="tiny-llama", lora=LORA, job_id="job-1", created=2.0,
                      user_metadata={"k": "v"})
    second = RunRecord(model_id="sess-a:train:1", base_model="demo", lora=LoraSettings(rank=1), job_id="job-2",
                       created=1.0)

    async def scenario(records: Records):
        await records.save_run("acme", first)
        await records.save_run("acme", second)
        return (await records.run("acme", first.model_id), await records.runs("acme"),
                await records.run("globex", first.model_id), await records.runs("globex"),
                await records.run("acme", "sess-a:train:9"))

    loaded, listed, other_one, other_all, unknown = records_scenario(redis_url, scenario)
    assert loaded == first
    assert loaded.lora == LORA
    assert listed == [second, first]  # oldest first
    assert (other_one, other_all, unknown) == (None, [], None)


def test_checkpoint_records_round_trip_list_and_delete_per_tenant(redis_url: str) -> None:
    one = _checkpoint("tinker://sess-a:train:0/weights/one", created=1.0)
    two = _checkpoint("tinker://sess-a:train:0/sampler_weights/two", created=2.0)
    other_run = _checkpoint("tinker://sess-b:train:0/weights/three", model_id="sess-b:train:0", created=3.0)

    async def scenario(records: Records):
        for record in (two, one, other_run):
            await records.save_checkpoint("acme", record)
        loaded = await records.checkpoint("acme", one.tinker_path)
        of_run = await records.checkpoints("acme", "sess-a:train:0")
        every = await records.checkpoints("acme")
        theirs = (await records.checkpoint("globex", one.tinker_path), await records.checkpoints("globex"),
                  await records.delete_checkpoint("globex", one.tinker_path))
        deleted = await records.delete_checkpoint("acme", one.tinker_path)
        return loaded, of_run, every, theirs, deleted, await records.checkpoint("acme", one.tinker_path), \
            await records.delete_checkpoint("acme", one.tinker_path)

    loaded, of_run, every, theirs, deleted, after, deleted_again = records_scenario(redis_url, scenario)
    assert loaded == one
    assert of_run == [one, two]
    assert every == [one, two, other_run]
    assert theirs == (None, [], False)  # and globex's delete did not touch acme's record:
    assert deleted is True
    assert (after, deleted_again) == (None, False)


def test_expired_checkpoints_are_hidden(redis_url: str) -> None:
    now = time.time()
    expired = _checkpoint("tinker://sess-a:train:0/weights/old", created=1.0, expires_at=now - 1)
    alive = _checkpoint("tinker://sess-a:train:0/weights/new", created=2.0, expires_at=now + 3600)
    forever = _checkpoint("tinker://sess-a:train:0/weights/keep", created=3.0)

    async def scenario(records: Records):
        for record in (expired, alive, forever):
            await records.save_checkpoint("acme", record)
        return (await records.checkpoint("acme", expired.tinker_path), await records.checkpoint("acme", alive.tinker_path),
                await records.checkpoints("acme"), await records.checkpoints("acme", "sess-a:train:0"))

    lookup_expired, lookup_alive, every, of_run = records_scenario(redis_url, scenario)
    assert lookup_expired is None
    assert lookup_alive == alive
    assert every == of_run == [alive, forever]


def test_records_survive_json_with_every_field() -> None:
    record = _checkpoint("tinker://m/weights/x", expires_at=123.5)
    assert CheckpointRecord.from_json(record.to_json()) == record
    assert CheckpointRecord.from_json(record.to_json().encode()) == record


def test_other_targets_are_accepted_where_they_train_nothing_and_get_no_loss_weight():
    """A recipe's placeholder targets (token 0 at prompt positions, advantage 0 there): accepted,
    the Trainer scores the next input token there under loss weight 0; any that would train is a 400."""
    from tinker.proto.request_conv import forward_backward_request_to_proto
    from tinker import types as tinker_types

    def request(advantages: list[float], loss_fn: str = "importance_sampling") -> wire.ForwardBackwardRequest:
        datum = tinker_types.Datum(model_input=tinker_types.ModelInput.from_ints([5, 6, 7, 8]),
                                   loss_fn_inputs={"target_tokens": [0, 0, 8, 9], "logprobs": [-1.0] * 4,
                                                   "advantages": advantages})
        body = tinker_types.ForwardBackwardRequest(
            forward_backward_input=tinker_types.ForwardBackwardInput(data=[datum], loss_fn=loss_fn,
                                                                    loss_fn_config={"beta": 0.1} if loss_fn == "dro" else None),
            model_id="m", seq_id=1)
        return forward_backward_request_to_proto(body)

    prepared = datums.prepare(request([0.0, 0.0, 1.0, 1.0]).data, losses.tinker_loss("importance_sampling"))[0]
    assert list(prepared.datum.tokens) == [5, 6, 7, 8, 9]
    assert list(prepared.datum.loss_mask) == [0.0, 0.0, 0.0, 1.0, 1.0]
    with pytest.raises(BadRequest, match=r"target_tokens\[1\] is not model_input\[2\] and it trains"):
        datums.prepare(request([0.0, 1.0, 1.0, 1.0]).data, losses.tinker_loss("importance_sampling"))
    with pytest.raises(BadRequest, match="dro penalises every position"):
        datums.prepare(request([0.0, 0.0, 1.0, 1.0], "dro").data, losses.tinker_loss("dro"))
