"""A weights header from the Trainer's export to the Rollout's domain header: both ends remember a
layout's tensor list, so exports of alternating layouts must still each get their own."""

from __future__ import annotations

import pytest

from opentinker_api.common.v1 import weights_pb2
from opentinker_runtime.ml.shared_weights import SharedFile
from opentinker_runtime.ml.sources import LoraSpec
from opentinker_runtime.ml.weights import ChecksumAlgorithm, TensorSpec, WeightsChecksum, WeightsPackage
from opentinker_rollout import convert as rollout_convert
from opentinker_rollout.errors import InvalidArgument
from opentinker_trainer import convert as trainer_convert
from opentinker_trainer.export import WeightsExport, WeightsFormat


def export(rows: int, version: int, *, lora: bool = True) -> WeightsExport:
    specs = [TensorSpec(name="a.lora_A", dtype="float32", shape=(rows, 8), byte_length=rows * 32),
             TensorSpec(name="b.lora_B", dtype="bfloat16", shape=(8, rows), byte_length=rows * 16)]
    checksum = WeightsChecksum(algorithm=ChecksumAlgorithm.XXH3_64_CHUNKED, hex_digest=f"{version:016x}")
    shared = SharedFile(name=f"trainer-1-ab/{version:032x}.safetensors", size_bytes=100 + version,
                        nonce=f"{version:032x}")
    return WeightsExport(format=WeightsFormat.LORA_ADAPTER if lora else WeightsFormat.FULL, policy_version=version,
                         lora=LoraSpec(rank=8, alpha=16.0) if lora else None,
                         package=WeightsPackage(specs, checksum, iter(())), shared_file=shared)


def test_each_export_arrives_with_its_own_tensors_version_checksum_and_file() -> None:
    for rows, version, lora in ((3, 1, True), (5, 2, True), (3, 3, True), (3, 4, False), (5, 5, True)):
        sent = export(rows, version, lora=lora)
        message = trainer_convert.weights_header(sent)
        assert [spec.name for spec in message.tensors] == ["a.lora_A", "b.lora_B"]
        received = rollout_convert.weights_header(weights_pb2.WeightsHeader.FromString(message.SerializeToString()))
        assert received.tensors == tuple(sent.package.specs)
        assert received.policy_version == version and received.total_bytes == rows * 48
        assert received.checksum == sent.package.checksum and received.shared_file == sent.shared_file
        assert received.format.value == ("lora_adapter" if lora else "full")


def test_a_bad_tensor_is_refused_every_time() -> None:
    message = trainer_convert.weights_header(export(3, 1))
    message.tensors[1].dtype = 99
    for _ in range(2):
        with pytest.raises(InvalidArgument, match=r"header.tensors\[1\].dtype"):
            rollout_convert.weights_header(message)
