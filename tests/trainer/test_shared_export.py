"""ExportWeights with transport SHARED_MEMORY on a real Trainer server: only the header travels,
the file holds the session's weights, and no file outlives its use (the session's next export,
a stream export, a closed session, the Trainer's stop)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import torch

from opentinker_api.common.v1 import algorithm_pb2, model_pb2, resources_pb2, weights_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import start_server, stop_server
from opentinker_runtime.ml.models import build_builtin
from opentinker_runtime.ml.shared_weights import SharedFile, read_shared_weights
from opentinker_runtime.ml.weights import ChecksumAlgorithm, TensorSpec, WeightsChecksum
from opentinker_trainer.main import build_plan
from opentinker_trainer.settings import TrainerSettings

LEASE = resources_pb2.LeaseContext(job_id="job-x", lease_id="l1", fencing_token=1)
SHM, STREAM = weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY, weights_pb2.WEIGHTS_TRANSPORT_STREAM
DTYPES = {weights_pb2.TENSOR_DTYPE_FLOAT32: "float32"}


async def serve(tmp_path: Path, shared_dir: str, scenario):
    settings = TrainerSettings(auth="disabled", port=0, checkpoint_dir=tmp_path / "ckpt", device="cpu",
                               shared_weights_dir=shared_dir)
    plan = await build_plan(settings)
    server = await start_server(settings, plan)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = pb_grpc.TrainerServiceStub(channel)
            session = (await stub.CreateSession(pb.CreateSessionRequest(
                lease=LEASE, seed=1, adaptation=model_pb2.Adaptation(full=model_pb2.FullAdaptation()),
                base_model=model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-llama")),
                optimizer=algorithm_pb2.OptimizerConfig(learning_rate=1e-3)))).session
            return await scenario(stub, session.session_id)
    finally:
        await stop_server(server, grace_seconds=1)
        for hook in plan.close_hooks:
            await hook()


async def export(stub, session_id: str, transport: int) -> list[pb.ExportWeightsResponse]:
    request = pb.ExportWeightsRequest(session_id=session_id, transport=transport)
    return [item async for item in stub.ExportWeights(request)]


def files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


def test_the_header_names_a_file_that_holds_the_weights_and_each_file_goes_after_its_use(tmp_path: Path) -> None:
    root = tmp_path / "shm"

    async def scenario(stub, session_id):
        first = await export(stub, session_id, SHM)
        after_first = [(path, path.stat().st_size) for path in files(root)]
        second = await export(stub, session_id, SHM)
        after_second = files(root)
        streamed = await export(stub, session_id, STREAM)
        after_stream = files(root)
        await export(stub, session_id, SHM)
        await stub.CloseSession(pb.CloseSessionRequest(session_id=session_id, lease=LEASE))
        return first, after_first, second, after_second, streamed, after_stream

    first, after_first, second, after_second, streamed, after_stream = asyncio.run(serve(tmp_path, str(root), scenario))
    assert len(first) == 1 and first[0].header.HasField("shared_file")  # the header only
    header = first[0].header
    assert after_first == [(root / header.shared_file.name, header.shared_file.size_bytes)]
    assert after_second == [root / second[0].header.shared_file.name] != [after_first[0][0]]  # the previous went
    assert not streamed[0].header.HasField("shared_file") and len(streamed) > 1
    assert streamed[0].header.checksum == header.checksum  # the same bytes either way
    assert after_stream == []  # a stream export removes the session's waiting file
    assert files(root) == [] and not any(root.iterdir())  # the Trainer's stop removed its directory


def test_the_file_holds_exactly_the_sessions_weights(tmp_path: Path) -> None:
    root = tmp_path / "shm"

    async def scenario(stub, session_id):
        header = (await export(stub, session_id, SHM))[0].header
        specs = [TensorSpec(name=t.name, dtype=DTYPES[t.dtype], shape=tuple(t.shape), byte_length=t.byte_length)
                 for t in header.tensors]
        assert header.checksum.algorithm == weights_pb2.CHECKSUM_ALGORITHM_XXH3_64_CHUNKED
        checksum = WeightsChecksum(algorithm=ChecksumAlgorithm.XXH3_64_CHUNKED, hex_digest=header.checksum.hex_digest)
        shared = SharedFile(name=header.shared_file.name, size_bytes=header.shared_file.size_bytes,
                            nonce=header.shared_file.nonce)
        return {name: tensor.clone() for name, tensor in read_shared_weights(root, shared, specs, checksum).items()}

    received = asyncio.run(serve(tmp_path, str(root), scenario))
    expected = build_builtin("tiny-llama", 0).state_dict()  # the base model's seed, no step taken
    assert list(received) == list(expected)
    assert all(torch.equal(received[name], expected[name]) for name in expected)


def test_a_trainer_without_a_shared_directory_streams(tmp_path: Path) -> None:
    async def scenario(stub, session_id):
        return await export(stub, session_id, SHM)

    items = asyncio.run(serve(tmp_path, "", scenario))
    assert not items[0].header.HasField("shared_file") and len(items) > 1
    assert all(item.WhichOneof("item") == "chunk" for item in items[1:])
    assert max(len(item.chunk.data) for item in items[1:]) <= 4 * 1024 * 1024 - 64 * 1024
