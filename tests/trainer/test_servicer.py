"""The TrainerService over a real in-process gRPC server on a free port, through the
generated stubs: the whole session lifecycle, idempotent steps, refusals with status codes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import torch
from google.protobuf.message import Message

from opentinker_api.common.v1 import algorithm_pb2 as algo_pb
from opentinker_api.common.v1 import datum_pb2, model_pb2, weights_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_runtime.ml.models import build_builtin
from opentinker_runtime.ml.weights import ChecksumAlgorithm, TensorSpec, WeightsAssembler, WeightsChecksum
from opentinker_trainer.batching import Datum
from opentinker_api.conventions import REASON_METADATA_KEY
from tests.trainer.helpers import MODEL, rl_datums, rows_close, sft_datums
from tests.trainer._servicer import (CE, PPO, call_error, create_request, fb_request, lease, logprob_rows,  # noqa: F401
                                     stub)  # stub: the fixture

DTYPES = {weights_pb2.TENSOR_DTYPE_FLOAT32: "float32", weights_pb2.TENSOR_DTYPE_BFLOAT16: "bfloat16"}


def assemble(responses) -> tuple[weights_pb2.WeightsHeader, dict[str, torch.Tensor]]:
    header, *chunks = responses
    assert header.WhichOneof("item") == "header" and all(c.WhichOneof("item") == "chunk" for c in chunks)
    specs = [TensorSpec(name=t.name, dtype=DTYPES[t.dtype], shape=tuple(t.shape), byte_length=t.byte_length)
             for t in header.header.tensors]
    assert not header.header.sha256
    assert header.header.checksum.algorithm == weights_pb2.CHECKSUM_ALGORITHM_XXH3_64_CHUNKED
    assembler = WeightsAssembler(specs, WeightsChecksum(algorithm=ChecksumAlgorithm.XXH3_64_CHUNKED,
                                                        hex_digest=header.header.checksum.hex_digest))
    for item in chunks:
        assembler.add(item.chunk.tensor_name, item.chunk.offset, item.chunk.data)
    return header.header, assembler.finish()


def test_full_session_lifecycle(stub) -> None:
    created = stub.CreateSession(create_request(request_id="create-1")).session
    sid = created.session_id
    assert created.job_id == "job-1" and created.step == 0 and created.policy_version == 0
    assert created.model_info.vocab_size == 260 and created.model_info.stop_token_ids == [259]
    assert created.adaptation.full.keep_reference and created.device_ids == ["cpu:0"]
    assert stub.CreateSession(create_request(request_id="create-1")).session.session_id == sid
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).session.session_id == sid

    sequences = [datum_pb2.TokenSequence(tokens=d.tokens) for d in sft_datums()]
    reference = stub.ComputeLogprobs(pb.ComputeLogprobsRequest(session_id=sid, sequences=sequences,
                                                               reference=True))
    fb = stub.ForwardBackward(fb_request(sid))
    assert fb.loss > 0 and fb.num_tokens > 0 and "entropy" in fb.metrics
    assert rows_close(logprob_rows(fb), logprob_rows(reference))
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).session.pending_datums == 4

    step = stub.OptimStep(pb.OptimStepRequest(session_id=sid, lease=lease(), request_id="step-1"))
    assert (step.step, step.policy_version) == (1, 1) and step.grad_norm > 0
    assert step.learning_rate == pytest.approx(1e-2)
    retry = stub.OptimStep(pb.OptimStepRequest(session_id=sid, lease=lease(), request_id="step-1"))
    assert retry == step
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).session.step == 1

    saved = stub.SaveCheckpoint(pb.SaveCheckpointRequest(
        session_id=sid, lease=lease(), format=pb.CHECKPOINT_FORMAT_TRAINING_STATE,
        data_cursor=b"\x00cur")).checkpoint
    assert saved.checkpoint_id == "job-1-step-1" and saved.step == 1 and saved.size_bytes > 0
    assert (Path(saved.path) / "checkpoint.json").is_file()
    after_save = stub.ComputeLogprobs(pb.ComputeLogprobsRequest(session_id=sid, sequences=sequences))
    stub.ForwardBackward(fb_request(sid))
    stub.OptimStep(pb.OptimStepRequest(session_id=sid, lease=lease()))

    loaded = stub.LoadCheckpoint(pb.LoadCheckpointRequest(session_id=sid, lease=lease(),
                                                          checkpoint_id=saved.checkpoint_id))
    assert loaded.data_cursor == b"\x00cur"
    assert (loaded.session.step, loaded.session.policy_version) == (1, 3)
    policy = stub.ComputeLogprobs(pb.ComputeLogprobsRequest(session_id=sid, sequences=sequences))
    assert rows_close(logprob_rows(policy), logprob_rows(after_save), atol=1e-6)

    header, state = assemble(list(stub.ExportWeights(pb.ExportWeightsRequest(
        session_id=sid, format=weights_pb2.WEIGHTS_FORMAT_FULL, chunk_bytes=65536))))
    assert header.format == weights_pb2.WEIGHTS_FORMAT_FULL and header.policy_version == 3
    assert header.total_bytes == sum(t.numel() * 4 for t in state.values())
    receiver = build_builtin(MODEL, 99)
    receiver.load_state_dict(state)
    with torch.no_grad():
        tokens = torch.tensor([sft_datums()[0].tokens])
        logits = receiver(input_ids=tokens).logits[0, :-1].log_softmax(-1)
    mine = logits.gather(-1, tokens[0, 1:, None]).squeeze(-1)
    assert torch.allclose(mine, torch.tensor(logprob_rows(policy)[0][1:]), atol=1e-5)

    closed = stub.CloseSession(pb.CloseSessionRequest(session_id=sid, lease=lease())).session
    assert closed.session_id == sid and closed.step == 1
    with pytest.raises(grpc.RpcError) as raised:
        stub.GetSession(pb.GetSessionRequest(session_id=sid))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


def test_lora_session_exports_its_adapter_by_default(stub) -> None:
    sid = stub.CreateSession(create_request("job-lora", lora=True)).session.session_id
    stub.ForwardBackward(fb_request(sid, rl_datums(), PPO, job="job-lora"))
    stub.OptimStep(pb.OptimStepRequest(session_id=sid, lease=lease(job="job-lora")))
    header, state = assemble(list(stub.ExportWeights(pb.ExportWeightsRequest(session_id=sid))))
    assert header.format == weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER and header.policy_version == 1
    assert header.adaptation.lora.rank == 4 and header.adaptation.lora.alpha == 8.0
    assert state and all("lora_" in name for name in state)
    saved = stub.SaveCheckpoint(pb.SaveCheckpointRequest(
        session_id=sid, lease=lease(job="job-lora"), format=pb.CHECKPOINT_FORMAT_PEFT_ADAPTER, name="a"))
    assert (Path(saved.checkpoint.path) / "adapter" / "adapter_config.json").is_file()


NOT_FOUND, INVALID, PRECONDITION = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                                    grpc.StatusCode.FAILED_PRECONDITION)
BAD_JOB = "job-bad"


@dataclass(frozen=True)
class Bad:
    """A bad call on the open session `sid` and the refusal it must get."""

    method: str
    request: Callable[[str], Message]
    code: grpc.StatusCode
    words: str
    reason: str = ""


def bad_fb(datums=None, loss=CE) -> Callable[[str], Message]:
    return lambda sid: fb_request(sid, datums, loss, job=BAD_JOB)


def bad_create(**overrides) -> Callable[[str], Message]:
    return lambda sid: create_request("job-x", **overrides)


def bad_step(token: int = 1, job: str = BAD_JOB) -> Callable[[str], Message]:
    return lambda sid: pb.OptimStepRequest(session_id=sid, lease=lease(token, job))


NO_SAMPLING = [Datum(tokens=d.tokens, loss_mask=d.loss_mask, advantages=d.advantages) for d in rl_datums()]
UNKNOWN_CHECKPOINT = model_pb2.ModelReference(checkpoint=model_pb2.CheckpointModel(checkpoint_id="none-such"))
BAD_CASES = {
    "unknown session": Bad("GetSession", lambda sid: pb.GetSessionRequest(session_id="sess-nope"),
                           NOT_FOUND, "no open session 'sess-nope'", "ERROR_REASON_SESSION_NOT_FOUND"),
    "no session id": Bad("GetSession", lambda sid: pb.GetSessionRequest(), INVALID,
                         "session_id: is required", "ERROR_REASON_INVALID_FIELD"),
    "no adaptation": Bad("CreateSession", bad_create(adaptation=model_pb2.Adaptation()), INVALID,
                         "adaptation: set lora or full", "ERROR_REASON_INVALID_FIELD"),
    "unknown builtin": Bad("CreateSession", bad_create(model="gpt-9"), INVALID,
                           "base_model.builtin.name: unknown builtin model 'gpt-9'"),
    "no learning rate": Bad("CreateSession", bad_create(optimizer=algo_pb.OptimizerConfig()), INVALID,
                            "optimizer.learning_rate: must be > 0"),
    "unknown base checkpoint": Bad("CreateSession", bad_create(base_model=UNKNOWN_CHECKPOINT), NOT_FOUND,
                                   "no checkpoint 'none-such'"),
    "short loss mask": Bad("ForwardBackward", bad_fb([*sft_datums()[:1], Datum(tokens=(1, 2, 3),
                                                                               loss_mask=(1.0,))]),
                           INVALID, "datums[1].loss_mask: has 1 values for 3 tokens"),
    "ppo without sampling logprobs": Bad("ForwardBackward", bad_fb(NO_SAMPLING, PPO), INVALID,
                                         "datums[0].sampling_logprobs"),
    "token outside vocab": Bad("ForwardBackward", bad_fb([Datum(tokens=(1, 999), loss_mask=(0.0, 1.0))]),
                               INVALID, "datums[0].tokens: token id 999 is outside the vocabulary"),
    "no loss function": Bad("ForwardBackward", bad_fb(loss=algo_pb.LossConfig()), INVALID,
                            "loss.function: LOSS_FUNCTION_UNSPECIFIED is not accepted"),
    "ppo without clip": Bad("ForwardBackward", bad_fb(rl_datums(), algo_pb.LossConfig(
        function=algo_pb.LOSS_FUNCTION_PPO_CLIP)), INVALID, "loss.clip_low: must be in (0, 1)"),
    "step without gradients": Bad("OptimStep", bad_step(), PRECONDITION, "call ForwardBackward first"),
    "stale fencing token": Bad("OptimStep", bad_step(token=0), PRECONDITION, "fencing_token: 0 is stale",
                               "ERROR_REASON_STALE_FENCING_TOKEN"),
    "lease of another job": Bad("OptimStep", bad_step(job="job-1"), INVALID, "lease.job_id: 'job-1' is not"),
    "unknown checkpoint": Bad("LoadCheckpoint", lambda sid: pb.LoadCheckpointRequest(
        session_id=sid, lease=lease(job=BAD_JOB), checkpoint_id="none-such"), NOT_FOUND, "no checkpoint"),
    "lora export of a full session": Bad("ExportWeights", lambda sid: pb.ExportWeightsRequest(
        session_id=sid, format=weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER), INVALID,
        "format: WEIGHTS_FORMAT_LORA_ADAPTER"),
    "export of an unknown session": Bad("ExportWeights", lambda sid: pb.ExportWeightsRequest(
        session_id="sess-nope"), NOT_FOUND, "sess-nope", "ERROR_REASON_SESSION_NOT_FOUND"),
    "negative temperature": Bad("ComputeLogprobs", lambda sid: pb.ComputeLogprobsRequest(
        session_id=sid, sequences=[datum_pb2.TokenSequence(tokens=[1, 2])], temperature=-1), INVALID,
        "temperature: must be > 0"),
}


@pytest.fixture(scope="module")
def open_sid(stub) -> str:
    return stub.CreateSession(create_request(BAD_JOB, request_id="bad-session")).session.session_id


def reason_of(error: grpc.RpcError) -> str:
    return dict(error.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_requests_get_the_status_code_and_name_the_field(stub, open_sid, case) -> None:
    bad = BAD_CASES[case]
    error = call_error(getattr(stub, bad.method), bad.request(open_sid))
    assert error.code() == bad.code, error.details()
    assert bad.words in error.details()
    if bad.reason:
        assert reason_of(error) == bad.reason


def test_a_reused_request_id_with_another_request_is_refused(stub) -> None:
    sid = stub.CreateSession(create_request("job-reuse")).session.session_id
    stub.ForwardBackward(fb_request(sid, job="job-reuse"))
    stub.OptimStep(pb.OptimStepRequest(session_id=sid, lease=lease(job="job-reuse"), request_id="r"))
    error = call_error(stub.OptimStep, pb.OptimStepRequest(session_id=sid, lease=lease(job="job-reuse"),
                                                            request_id="r", learning_rate=0.5))
    assert error.code() == INVALID and reason_of(error) == "ERROR_REASON_REQUEST_ID_REUSED"


def test_the_server_answers_other_calls_while_a_forward_backward_runs(stub) -> None:
    sid = stub.CreateSession(create_request("job-busy", model="tiny-llama")).session.session_id
    busy = stub.ForwardBackward.future(fb_request(sid, rl_datums(count=48, length=256), PPO, job="job-busy"))
    time.sleep(0.1)
    started = time.monotonic()
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).session.session_id == sid
    answered = time.monotonic() - started
    assert not busy.done(), "make the ForwardBackward bigger: it finished before GetSession"
    assert answered < 0.5
    assert busy.result().num_tokens > 0


def test_a_forward_backward_retried_with_its_request_id_accumulates_gradients_once(stub) -> None:
    """A client whose connection died after the Trainer applied a ForwardBackward sends it again:
    the step must be the one a single call would have made (same grad norm as a session that
    got it once), not twice the gradient."""
    norms = []
    for job, sends in (("job-once", 1), ("job-retried", 3)):
        sid = stub.CreateSession(create_request(job)).session.session_id
        for _ in range(sends):
            stub.ForwardBackward(fb_request(sid, job=job, request_id=f"{job}/backward/1"))
        norms.append(stub.OptimStep(pb.OptimStepRequest(session_id=sid, lease=lease(job=job),
                                                        request_id=f"{job}/optim/1")).grad_norm)
    assert norms[0] > 0 and norms[1] == pytest.approx(norms[0], rel=1e-6)
