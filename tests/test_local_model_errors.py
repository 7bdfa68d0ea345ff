"""A `model.local.path` that is no model is INVALID_ARGUMENT on Trainer and Rollout, never UNKNOWN, and
the answer for a directory that exists (but holds no model) is the answer for one that does not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from opentinker_api.common.v1 import model_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as trainer_grpc
from opentinker_trainer.settings import TrainerSettings
from tests.rollout._servers import LEASE, with_servers
from tests.trainer._servicer import ServerThread, create_request


def not_models(tmp_path: Path) -> list[Path]:
    """A directory that holds no model, one whose config.json names no architecture, one with only a
    GGUF file (what llama.cpp users have), a missing one."""
    empty, unknown, gguf = tmp_path / "empty", tmp_path / "unknown", tmp_path / "gguf"
    for directory in (empty, unknown, gguf):
        directory.mkdir()
    (unknown / "config.json").write_text("{}")
    (gguf / "model-Q8_0.gguf").write_bytes(b"GGUF" + bytes(60))
    return [empty, unknown, gguf, tmp_path / "missing"]


def local(path: Path) -> model_pb2.ModelReference:
    return model_pb2.ModelReference(local=model_pb2.LocalModel(path=str(path)))


def same_answer(errors: list[tuple[grpc.StatusCode, str]], paths: list[Path], field: str) -> None:
    answers = {(code, details.replace(str(path), "PATH")) for (code, details), path in zip(errors, paths, strict=True)}
    assert answers == {(grpc.StatusCode.INVALID_ARGUMENT,
                        f"{field}PATH is not a model directory on this worker (config.json, weights and "
                        "tokenizer files it can read; a GGUF file is not one: convert it first, e.g. "
                        "transformers' from_pretrained(dir, gguf_file=...) then save_pretrained)")}, answers


def test_the_rollout_answers_invalid_argument_alike(tmp_path: Path) -> None:
    paths = not_models(tmp_path)

    async def scenario(stub, game):  # noqa: ANN001, ANN202
        errors = []
        for path in paths:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.LoadModel(rollout_pb.LoadModelRequest(request_id=path.name, lease=LEASE, model=local(path)))
            errors.append((refused.value.code(), refused.value.details()))
        return errors

    same_answer(asyncio.run(with_servers(scenario, tmp_path)), paths, "model: path: ")


def test_the_trainer_answers_invalid_argument_alike(tmp_path: Path) -> None:
    paths = not_models(tmp_path)
    with ServerThread(TrainerSettings(auth="disabled", port=0, checkpoint_dir=tmp_path)) as address, \
            grpc.insecure_channel(address) as channel:
        stub = trainer_grpc.TrainerServiceStub(channel)
        errors = []
        for path in paths:
            with pytest.raises(grpc.RpcError) as refused:
                stub.CreateSession(create_request(request_id=path.name, base_model=local(path)))
            errors.append((refused.value.code(), refused.value.details()))
    same_answer(errors, paths, "base_model.local.path: ")
