"""Tinker datums <-> the Trainer's datums, and forward_backward outputs back to Tinker's wire.

A Tinker datum is `model_input` x_0..x_{n-1} with per-position `loss_fn_inputs` aligned to
`target_tokens` y_0..y_{n-1}, where position i predicts y_i from x_0..x_i. The Trainer's datum is
one token list whose index t predicts tokens[t] from tokens[:t] (index 0 never trains); with
y_i = x_{i+1} (next-token targets, what every Tinker recipe builds) the two are the same sequence:
tokens = x + [y_{n-1}], Tinker position i = Trainer index i + 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from opentinker_api.common.v1 import datum_pb2
from opentinker_gateway.errors import BadRequest
from opentinker_gateway.losses import TinkerLoss
from opentinker_gateway.wire import tinker_public_pb2 as wire

LOG_RATIO_CLAMP = 20.0
"""The Trainer clamps |log r| at 20 before exp (its ratio losses); the outputs follow it."""
DTYPES = {wire.DTYPE_FLOAT32: np.float32, wire.DTYPE_INT64: np.int64, wire.DTYPE_INT32: np.int32}


@dataclass(frozen=True)
class PreparedDatum:
    """One datum in the Trainer's form, with the Tinker arrays the outputs are computed from."""

    datum: datum_pb2.Datum
    inputs: dict[str, np.ndarray]


def model_input_tokens(chunks: Sequence[wire.Chunk], where: str) -> list[int]:
    tokens: list[int] = []
    for index, chunk in enumerate(chunks):
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise BadRequest(f"{where}.model_input.chunks[{index}]: only encoded_text chunks are supported "
                             f"(got {chunk.WhichOneof('chunk')}: images and audio need a multimodal model)")
        data = chunk.encoded_text.tokens
        if len(data) % 4:
            raise BadRequest(f"{where}.model_input.chunks[{index}]: {len(data)} bytes are not int32 token ids")
        tokens.extend(np.frombuffer(data, dtype=np.int32).tolist())
    return tokens


def tensor_array(tensor: wire.Tensor, where: str) -> np.ndarray:
    if tensor.WhichOneof("encoding") != "dense":
        raise BadRequest(f"{where}: sparse tensors are not supported (send a dense 1-D array)")
    dtype = DTYPES.get(tensor.dtype)
    if dtype is None:
        raise BadRequest(f"{where}: dtype {wire.DType.Name(tensor.dtype)} is not supported")
    data = tensor.dense
    if len(data) % np.dtype(dtype).itemsize:
        raise BadRequest(f"{where}: {len(data)} bytes is not a whole number of {np.dtype(dtype).name} values")
    array = np.frombuffer(data, dtype=dtype)
    shape = list(tensor.shape) or [array.size]
    if len(shape) != 1 or shape[0] != array.size:
        raise BadRequest(f"{where}: shape {shape} is not supported (one value per target position)")
    return array


def prepare(data: Sequence[wire.Datum], loss: TinkerLoss) -> list[PreparedDatum]:
    if not data:
        raise BadRequest("forward_backward_input.data is empty")
    return [_prepare_one(datum, loss, f"data[{index}]") for index, datum in enumerate(data)]


def _prepare_one(datum: wire.Datum, loss: TinkerLoss, where: str) -> PreparedDatum:
    tokens = model_input_tokens(datum.model_input, where)
    if not tokens:
        raise BadRequest(f"{where}.model_input is empty")
    inputs = _loss_inputs(datum, loss, len(tokens), where)
    untrained = _other_targets(inputs, np.asarray(tokens[1:]), loss, where)
    sequence = [*tokens, int(inputs["target_tokens"][-1])]
    return PreparedDatum(datum=_trainer_datum(sequence, inputs, loss, untrained), inputs=inputs)


def _other_targets(inputs: dict[str, np.ndarray], next_tokens: np.ndarray, loss: TinkerLoss, where: str) -> np.ndarray:
    """Positions whose target is not the next input token. Accepted only where they train nothing
    (weight 0, or advantage 0 for the policy losses: e.g. a recipe's placeholder targets on the
    prompt); there the Trainer scores the next input token instead, under a zero loss weight."""
    other = np.zeros(len(inputs["target_tokens"]), dtype=bool)
    other[:-1] = inputs["target_tokens"][:-1] != next_tokens
    if not other.any():
        return other
    weight = inputs["weights"] if "weights" in inputs else inputs["advantages"]
    trains = other & (weight != 0)
    if loss.name == "dro" or trains.any():
        position = int(np.flatnonzero(trains if trains.any() else other)[0])
        why = "dro penalises every position" if loss.name == "dro" and not trains.any() else "it trains"
        raise BadRequest(f"{where}.loss_fn_inputs.target_tokens[{position}] is not model_input[{position + 1}] and "
                         f"{why}: a target that is not the next token is supported only where the weight "
                         f"(or advantage) is 0")
    return other


def _loss_inputs(datum: wire.Datum, loss: TinkerLoss, length: int, where: str) -> dict[str, np.ndarray]:
    wanted = ("target_tokens", *loss.inputs)
    for name in datum.loss_fn_inputs:
        if name not in wanted:
            raise BadRequest(f"{where}.loss_fn_inputs[{name!r}] is not an input of {loss.name} "
                             f"(it takes {', '.join(wanted)})")
    inputs = {}
    for name in wanted:
        if name not in datum.loss_fn_inputs:
            raise BadRequest(f"{where}.loss_fn_inputs[{name!r}] is missing ({loss.name} needs {', '.join(wanted)})")
        array = tensor_array(datum.loss_fn_inputs[name], f"{where}.loss_fn_inputs[{name!r}]")
        if array.size != length:
            raise BadRequest(f"{where}.loss_fn_inputs[{name!r}] has {array.size} values for {length} "
                             f"model_input tokens (one per position)")
        if name != "target_tokens" and not np.all(np.isfinite(array)):
            raise BadRequest(f"{where}.loss_fn_inputs[{name!r}] holds NaN or infinity")
        inputs[name] = array.astype(np.int64 if name == "target_tokens" else np.float32)
    return inputs


def _trainer_datum(sequence: list[int], inputs: dict[str, np.ndarray], loss: TinkerLoss,
                   untrained: np.ndarray) -> datum_pb2.Datum:
    def shifted(values: np.ndarray) -> list[float]:
        return [0.0, *values.tolist()]

    length = len(sequence) - 1
    mask = inputs["weights"] if "weights" in inputs else np.where(untrained, 0.0, 1.0).astype(np.float32)
    datum = datum_pb2.Datum(tokens=sequence, loss_mask=shifted(mask))
    if loss.uses_advantages:
        datum.advantages.extend(shifted(inputs["advantages"]))
        datum.sampling_logprobs.extend(shifted(inputs["logprobs"]))
    return datum


def target_logprobs(trainer_logprobs: Sequence[float]) -> np.ndarray:
    """The Trainer's per-token logprobs (index 0 = 0) as Tinker's per-position ones."""
    return np.asarray(trainer_logprobs, dtype=np.float32)[1:]


def elementwise_loss(loss: TinkerLoss, config: dict, logprobs: np.ndarray, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Each position's loss, by the formula the Trainer minimises (their sum is loss:sum)."""
    if loss.name == "cross_entropy":
        return -inputs["weights"] * logprobs
    advantages, old = inputs["advantages"], inputs["logprobs"]
    ratio = np.exp(np.clip(logprobs.astype(np.float64) - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    if loss.name == "importance_sampling":
        return (-ratio * advantages).astype(np.float32)
    clipped = np.clip(ratio, 1 - config["clip_low"], 1 + config["clip_high"]) if "clip_low" in config else ratio
    if loss.name == "ppo":
        return (-np.minimum(ratio * advantages, clipped * advantages)).astype(np.float32)
    if loss.name == "cispo":
        return (-clipped * advantages * logprobs).astype(np.float32)
    beta = config.get("dro_beta", 0.0)
    return (-(advantages * logprobs - 0.5 * beta * (logprobs - old) ** 2)).astype(np.float32)


def batched(arrays: Sequence[np.ndarray], dtype: int = wire.DTYPE_FLOAT32) -> wire.BatchedTensor:
    """Per-datum 1-D arrays as one BatchedTensor (byte offsets, n + 1 of them)."""
    numpy_dtype = np.float32 if dtype == wire.DTYPE_FLOAT32 else np.int64
    parts = [np.ascontiguousarray(a, dtype=numpy_dtype) for a in arrays]
    offsets = np.cumsum([0, *(p.nbytes for p in parts)], dtype=np.int64)
    return wire.BatchedTensor(data=b"".join(p.tobytes() for p in parts), offsets=offsets.tobytes(), dtype=dtype)


def forward_backward_output(outputs: Sequence[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """Tinker's ForwardBackwardOutput proto: one ArrayRecord with each field for every datum."""
    record = wire.ArrayRecord(type_tag="ArrayRecord", num_datums=len(outputs))
    for name in (outputs[0] if outputs else {}):
        record.fields[name].CopyFrom(batched([o[name] for o in outputs]))
    message = wire.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record])
    for key, value in metrics.items():
        message.metrics[key] = float(value)
    return message.SerializeToString()
