"""Rollout.UpdateWeights with a header naming a shared-memory file, over a real socket: a good
file is applied (and deleted), and every bad one is refused with a clear status and reason
before anything changes (the policy keeps its version)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import pytest

from opentinker_api.common.v1 import model_pb2, resources_pb2, sampling_pb2, weights_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import start_server, stop_server
from opentinker_runtime.ml.shared_weights import SharedWeightsWriter
from opentinker_runtime.ml.weights import lora_state_dict
from opentinker_rollout.main import build_plan
from opentinker_rollout.settings import RolloutSettings
from tests.rollout._policies import lora_reference
from tests.rollout._support import MODEL_NAME

LEASE = resources_pb2.LeaseContext(job_id="job-shm", lease_id="l1", fencing_token=1)
GREEDY = pb.SampleRequest(prompts=[pb.Prompt(tokens={"tokens": list(range(40, 60))})],
                          sampling=sampling_pb2.SamplingParams(max_new_tokens=8, temperature=0.0))


def header_of(written, version: int) -> weights_pb2.WeightsHeader:
    dtypes = {"float32": weights_pb2.TENSOR_DTYPE_FLOAT32}
    return weights_pb2.WeightsHeader(
        format=weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER, policy_version=version,
        total_bytes=sum(s.byte_length for s in written.specs),
        tensors=[weights_pb2.TensorSpec(name=s.name, dtype=dtypes[s.dtype], shape=list(s.shape),
                                        byte_length=s.byte_length) for s in written.specs],
        checksum=weights_pb2.WeightsChecksum(algorithm=weights_pb2.CHECKSUM_ALGORITHM_XXH3_64_CHUNKED,
                                             hex_digest=written.checksum.hex_digest),
        shared_file=weights_pb2.SharedWeightsFile(name=written.file.name, size_bytes=written.file.size_bytes,
                                                  nonce=written.file.nonce))


def requests(policy_id: str, header: weights_pb2.WeightsHeader, *extra: pb.UpdateWeightsRequest):
    async def stream():
        yield pb.UpdateWeightsRequest(target=pb.UpdateWeightsTarget(policy_id=policy_id, lease=LEASE))
        yield pb.UpdateWeightsRequest(header=header)
        for message in extra:
            yield message
    return stream()


def reason(error: grpc.aio.AioRpcError) -> str:
    return dict(error.trailing_metadata() or ()).get("opentinker-reason", "")


def test_a_shared_file_is_applied_and_bad_ones_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "shm"
    writer = SharedWeightsWriter(root)
    writer.open()
    state = lora_state_dict(lora_reference())

    async def attempt(stub, policy_id, header, *extra):
        try:
            await stub.UpdateWeights(requests(policy_id, header, *extra))
        except grpc.aio.AioRpcError as error:
            return error
        raise AssertionError("the update was accepted")

    async def scenario():
        settings = RolloutSettings(auth="disabled", port=0, checkpoint_dir=tmp_path, shared_weights_dir=str(root))
        plan = await build_plan(settings)
        server = await start_server(settings, plan)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                stub = pb_grpc.RolloutServiceStub(channel)
                policy = await load_lora_policy(stub)
                greedy = pb.SampleRequest(policy_id=policy.policy_id)
                greedy.MergeFrom(GREEDY)
                before = (await stub.Sample(greedy)).results[0].completions[0].tokens
                errors = {}
                written = writer.write(state)
                outside = header_of(written, 1)
                outside.shared_file.name = "../../etc/passwd"
                errors["outside"] = await attempt(stub, policy.policy_id, outside)
                missing = header_of(written, 1)
                missing.shared_file.name = f"{writer.owner}/{'0' * 32}.safetensors"
                errors["missing"] = await attempt(stub, policy.policy_id, missing)
                truncated = header_of(written, 1)
                truncated.shared_file.size_bytes += 8
                errors["truncated"] = await attempt(stub, policy.policy_id, truncated)
                errors["chunks_too"] = await attempt(stub, policy.policy_id, header_of(written, 1), pb.UpdateWeightsRequest(
                    chunk=weights_pb2.WeightsChunk(tensor_name=written.specs[0].name, data=b"1234")))
                _flip_last_byte(root / written.file.name)
                errors["corrupt"] = await attempt(stub, policy.policy_id, header_of(written, 1))
                corrupt_file_left = (root / written.file.name).exists()
                unchanged = (await stub.Sample(greedy)).results[0].completions[0]
                good = writer.write(state)
                updated = await stub.UpdateWeights(requests(policy.policy_id, header_of(good, 1)))
                after = (await stub.Sample(greedy)).results[0].completions[0]
                return errors, corrupt_file_left, before, unchanged, updated, after, writer.files()
        finally:
            await stop_server(server, grace_seconds=1)
            for hook in plan.close_hooks:
                await hook()

    errors, corrupt_file_left, before, unchanged, updated, after, files = asyncio.run(scenario())
    writer.close()
    assert errors["outside"].code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason(errors["outside"]) == "ERROR_REASON_PATH_NOT_ALLOWED"
    assert errors["outside"].details().startswith("header.shared_file.name:")
    for name in ("missing", "truncated"):  # another host's file, or none: the sender should stream
        assert errors[name].code() == grpc.StatusCode.FAILED_PRECONDITION, name
        assert reason(errors[name]) == "ERROR_REASON_WEIGHTS_SHARED_FILE_UNAVAILABLE", name
        assert "send the weights as a stream" in errors[name].details(), name
    assert "does not exist" in errors["missing"].details()
    assert "the header says" in errors["truncated"].details()
    assert errors["chunks_too"].code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no chunks may follow" in errors["chunks_too"].details()
    assert errors["corrupt"].code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason(errors["corrupt"]) == "ERROR_REASON_WEIGHTS_CORRUPT"
    assert "xxh3_64_chunked mismatch" in errors["corrupt"].details()
    assert not corrupt_file_left
    assert unchanged.policy_version == 0 and list(unchanged.tokens) == list(before)
    assert updated.policy.policy_version == 1 and updated.bytes_received == sum(
        t.numel() * t.element_size() for t in state.values())
    assert after.policy_version == 1 and list(after.tokens) != list(before)
    assert files == []  # every file the Rollout read is gone


def _flip_last_byte(path: Path) -> None:
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_rollout_without_a_shared_directory_asks_for_the_stream(tmp_path: Path) -> None:
    writer = SharedWeightsWriter(tmp_path / "shm")
    writer.open()
    written = writer.write(lora_state_dict(lora_reference()))

    async def scenario():
        settings = RolloutSettings(auth="disabled", port=0, checkpoint_dir=tmp_path, shared_weights_dir="")
        plan = await build_plan(settings)
        server = await start_server(settings, plan)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                stub = pb_grpc.RolloutServiceStub(channel)
                policy = await load_lora_policy(stub)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.UpdateWeights(requests(policy.policy_id, header_of(written, 1)))
                return refused.value
        finally:
            await stop_server(server, grace_seconds=1)
            for hook in plan.close_hooks:
                await hook()

    error = asyncio.run(scenario())
    writer.close()
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(error) == "ERROR_REASON_WEIGHTS_SHARED_FILE_UNAVAILABLE"
    assert "OPENTINKER_SHARED_WEIGHTS_DIR is empty" in error.details()


async def load_lora_policy(stub: pb_grpc.RolloutServiceStub):  # noqa: ANN201
    """A rank-4 LoRA policy of the builtin model, loaded under LEASE."""
    return (await stub.LoadModel(pb.LoadModelRequest(
        lease=LEASE, adaptation=model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=4, alpha=8.0)),
        model=model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=MODEL_NAME))))).policy
